# Warnings and sanitizers applied to every fencelock target through fencelock_options.
add_library(fencelock_options INTERFACE)
# -Wno-missing-field-initializers: g++ 12 warns on designated initializers that leave fields to
# their defaults ({.ttl = 5s}), which is how the option aggregates are meant to be used.
target_compile_options(fencelock_options INTERFACE -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
                       -Wno-missing-field-initializers)
# Clang checks the lock annotations of core/thread_annotations.h (GUARDED_BY, REQUIRES, ...).
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  target_compile_options(fencelock_options INTERFACE -Wthread-safety)
endif()
if(FENCELOCK_WERROR)
  target_compile_options(fencelock_options INTERFACE -Werror)
endif()
if(FENCELOCK_SANITIZE)
  target_compile_options(fencelock_options INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer
                         -fno-sanitize-recover=undefined)
  target_link_options(fencelock_options INTERFACE -fsanitize=address,undefined)
endif()
if(FENCELOCK_TSAN)
  if(FENCELOCK_SANITIZE)
    message(FATAL_ERROR "FENCELOCK_TSAN and FENCELOCK_SANITIZE cannot be combined")
  endif()
  target_compile_options(fencelock_options INTERFACE -fsanitize=thread -fno-omit-frame-pointer)
  target_link_options(fencelock_options INTERFACE -fsanitize=thread)
endif()
