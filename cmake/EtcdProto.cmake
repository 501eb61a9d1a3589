# fencelock_etcd_proto: the C++ messages and gRPC stubs generated from src/etcd/*.proto.
#
# The generated code lives in this one static library so that it compiles once (about 15 s per
# generated file on 2 cores) however many targets use it. Its classes are in the C++ namespace
# fencelock::etcdserverpb (src/etcd/fencelock_etcd.proto says why), their gRPC paths etcd's.
# Consumers (the etcd backend, its tests, the bench baseline) include "etcd/fencelock_etcd.pb.h",
# "etcd/fencelock_etcd.grpc.pb.h", "etcd/fencelock_election.grpc.pb.h" (the include directory is
# PUBLIC and SYSTEM, so the project's warning flags do not apply to generated headers), and get
# gRPC::grpc++ and protobuf::libprotobuf through PUBLIC linkage. The generated sources are
# compiled without fencelock_options: their warnings are not ours to fix.
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_program(FENCELOCK_GRPC_CPP_PLUGIN grpc_cpp_plugin HINTS /usr/bin REQUIRED)

set(FENCELOCK_ETCD_PROTO_ROOT ${PROJECT_SOURCE_DIR}/src)
set(FENCELOCK_ETCD_PROTO_OUT ${PROJECT_BINARY_DIR}/generated)
set(FENCELOCK_ETCD_PROTOS etcd/fencelock_etcd.proto etcd/fencelock_election.proto)
list(TRANSFORM FENCELOCK_ETCD_PROTOS PREPEND ${FENCELOCK_ETCD_PROTO_ROOT}/
     OUTPUT_VARIABLE FENCELOCK_ETCD_PROTO_FILES)

set(fencelock_etcd_proto_sources)
foreach(proto IN LISTS FENCELOCK_ETCD_PROTOS)
  string(REGEX REPLACE "\\.proto$" "" stem ${proto})
  set(outputs ${FENCELOCK_ETCD_PROTO_OUT}/${stem}.pb.cc ${FENCELOCK_ETCD_PROTO_OUT}/${stem}.pb.h
              ${FENCELOCK_ETCD_PROTO_OUT}/${stem}.grpc.pb.cc
              ${FENCELOCK_ETCD_PROTO_OUT}/${stem}.grpc.pb.h)
  add_custom_command(
    OUTPUT ${outputs}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${FENCELOCK_ETCD_PROTO_OUT}
    COMMAND protobuf::protoc -I ${FENCELOCK_ETCD_PROTO_ROOT} --cpp_out=${FENCELOCK_ETCD_PROTO_OUT}
            --grpc_out=${FENCELOCK_ETCD_PROTO_OUT}
            --plugin=protoc-gen-grpc=${FENCELOCK_GRPC_CPP_PLUGIN}
            ${FENCELOCK_ETCD_PROTO_ROOT}/${proto}
    COMMAND ${CMAKE_COMMAND}
            "-DFILES=${FENCELOCK_ETCD_PROTO_OUT}/${stem}.grpc.pb.cc|${FENCELOCK_ETCD_PROTO_OUT}/${stem}.grpc.pb.h"
            -P ${PROJECT_SOURCE_DIR}/cmake/etcd_grpc_paths.cmake
    # Every file, not just this one: an imported .proto changes what protoc generates here.
    DEPENDS ${FENCELOCK_ETCD_PROTO_FILES} protobuf::protoc
            ${PROJECT_SOURCE_DIR}/cmake/etcd_grpc_paths.cmake
    COMMENT "Generating C++ and gRPC code from src/${proto}"
    VERBATIM)
  list(APPEND fencelock_etcd_proto_sources ${FENCELOCK_ETCD_PROTO_OUT}/${stem}.pb.cc
              ${FENCELOCK_ETCD_PROTO_OUT}/${stem}.grpc.pb.cc)
endforeach()

add_library(fencelock_etcd_proto STATIC ${fencelock_etcd_proto_sources})
set_target_properties(fencelock_etcd_proto PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_include_directories(fencelock_etcd_proto SYSTEM PUBLIC
                           $<BUILD_INTERFACE:${FENCELOCK_ETCD_PROTO_OUT}>)
target_link_libraries(fencelock_etcd_proto PUBLIC gRPC::grpc++ protobuf::libprotobuf)
