# embed_text_files(TARGET NAMESPACE NS FILES a.lua b.lua)
# Generates a header and source defining `inline constexpr std::string_view NS::<stem>` for each
# file (e.g. acquire.lua -> NS::acquire), rebuilt whenever a file changes. Used for Lua scripts so
# they live as files beside the code that runs them.
function(embed_text_files target)
  cmake_parse_arguments(ARG "" "NAMESPACE;HEADER" "FILES" ${ARGN})
  set(out_header ${CMAKE_CURRENT_BINARY_DIR}/${ARG_HEADER})
  string(REPLACE ";" "|" files_arg "${ARG_FILES}")
  add_custom_command(
    OUTPUT ${out_header}
    COMMAND ${CMAKE_COMMAND} -DOUT=${out_header} -DNS=${ARG_NAMESPACE} "-DFILES=${files_arg}"
            -P ${PROJECT_SOURCE_DIR}/cmake/embed_generate.cmake
    DEPENDS ${ARG_FILES} ${PROJECT_SOURCE_DIR}/cmake/embed_generate.cmake
    COMMENT "Embedding ${ARG_HEADER}"
    VERBATIM)
  target_sources(${target} PRIVATE ${out_header})
  target_include_directories(${target} PRIVATE ${CMAKE_CURRENT_BINARY_DIR})
endfunction()
