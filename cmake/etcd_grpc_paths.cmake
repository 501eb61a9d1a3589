# cmake -DFILES="a.grpc.pb.cc|a.grpc.pb.h" -P etcd_grpc_paths.cmake
# The generated gRPC code of src/etcd/*.proto calls "/fencelock.etcdserverpb.KV/Range": the path
# of the package the messages live in (fencelock_etcd.proto says why it is fencelock's). etcd
# serves "/etcdserverpb.KV/Range": put etcd's package back into the paths and service names, and
# nothing else (the messages and their descriptors keep fencelock's package).
string(REPLACE "|" ";" files "${FILES}")
foreach(file IN LISTS files)
  file(READ "${file}" text)
  set(before "${text}")
  string(REPLACE "\"/fencelock.etcdserverpb." "\"/etcdserverpb." text "${text}")
  string(REPLACE "\"/fencelock.v3electionpb." "\"/v3electionpb." text "${text}")
  string(REPLACE "return \"fencelock.etcdserverpb." "return \"etcdserverpb." text "${text}")
  string(REPLACE "return \"fencelock.v3electionpb." "return \"v3electionpb." text "${text}")
  if(file MATCHES "\\.cc$" AND text STREQUAL before)
    message(FATAL_ERROR "etcd_grpc_paths.cmake: no gRPC path to fix in ${file} (did protoc's "
                        "output change?)")
  endif()
  if(text MATCHES "\"/fencelock\\.")
    message(FATAL_ERROR "etcd_grpc_paths.cmake: a gRPC path of fencelock's package is left in ${file}")
  endif()
  file(WRITE "${file}" "${text}")
endforeach()
