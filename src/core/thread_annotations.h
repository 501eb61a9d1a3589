// Clang's thread-safety analysis (-Wthread-safety) as macros: real attributes under clang, nothing
// elsewhere (g++ ignores them). The analysis checks at compile time that a member marked
// FENCELOCK_GUARDED_BY(mu) is touched only with `mu` held and that a function marked
// FENCELOCK_REQUIRES(mu) is called only with it held. It needs a mutex type that says what it is:
// use fencelock::detail::Mutex and its scoped locks (core/mutex.h), not std::mutex, for guarded
// state. The clang build of scripts/test.sh --tsan compiles with -Wthread-safety -Werror.
#pragma once

#if defined(__clang__)
#define FENCELOCK_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define FENCELOCK_THREAD_ANNOTATION(x)
#endif

#define FENCELOCK_CAPABILITY(x) FENCELOCK_THREAD_ANNOTATION(capability(x))
#define FENCELOCK_SCOPED_CAPABILITY FENCELOCK_THREAD_ANNOTATION(scoped_lockable)
#define FENCELOCK_GUARDED_BY(x) FENCELOCK_THREAD_ANNOTATION(guarded_by(x))
#define FENCELOCK_PT_GUARDED_BY(x) FENCELOCK_THREAD_ANNOTATION(pt_guarded_by(x))
#define FENCELOCK_REQUIRES(...) FENCELOCK_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define FENCELOCK_EXCLUDES(...) FENCELOCK_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define FENCELOCK_ACQUIRE(...) FENCELOCK_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define FENCELOCK_RELEASE(...) FENCELOCK_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define FENCELOCK_TRY_ACQUIRE(...) FENCELOCK_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define FENCELOCK_ASSERT_CAPABILITY(x) FENCELOCK_THREAD_ANNOTATION(assert_capability(x))
#define FENCELOCK_RETURN_CAPABILITY(x) FENCELOCK_THREAD_ANNOTATION(lock_returned(x))
// For the rare function the analysis cannot follow; say why at each use.
#define FENCELOCK_NO_THREAD_SAFETY_ANALYSIS FENCELOCK_THREAD_ANNOTATION(no_thread_safety_analysis)
