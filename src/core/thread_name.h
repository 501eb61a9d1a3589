// Names of fencelock's threads, as `top -H`, `ps -L`, gdb and /proc/PID/task/*/comm show them:
// "fl-" and the thread's part (fl-engine, fl-renew, fl-watchdog, fl-subscribe, fl-alive,
// fl-finisher, fl-connect, fl-resolve, fl-pg-listen, fl-pg-cancel, fl-etcd-stream, fl-wait).
// `fencelock bench --scenario waiters` counts a process's threads by these names.
#pragma once

#include <pthread.h>

namespace fencelock::detail {

// Names the calling thread (at most 15 bytes: the kernel's limit). Best effort.
inline void name_this_thread(const char* name) { (void)pthread_setname_np(pthread_self(), name); }

}  // namespace fencelock::detail
