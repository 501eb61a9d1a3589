// fencelock: the command line interface. Argument parsing and dispatch only; each command lives
// in its own file (run_command, inspect_commands). docs/CLI.md is the manual.
#include <sys/prctl.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "backend_choice.h"
#include "bench_command.h"
#include "connect_warnings.h"
#include "demo_command.h"
#include "elect_command.h"
#include "exit_codes.h"
#include "inspect_commands.h"
#include "migrate_command.h"
#include "mistyped.h"
#include "run_command.h"
#include "terminal_text.h"
#include "torture/child_processes.h"
#include "torture/faults.h"
#include "torture/torture_command.h"

namespace fencelock::cli {
namespace {

constexpr const char* kFooter = R"(Environment:
  FENCELOCK_BACKEND  backend URI used when --backend is not given
                     (default redis://127.0.0.1:6379)

Exit codes:
  0    success (run: the command's own exit code; 128+N if signal N killed it)
  64   usage error: bad option, duration, key or backend URI
  69   backend unavailable (unreachable, no quorum, timed out)
  70   internal error
  73   run: the lease was lost while the command ran (it got SIGTERM);
       elect: the leadership was lost
  75   run: the lock was held by another owner for the whole --wait;
       elect: not elected within --wait
  77   credentials rejected by the backend
  126  run: the command cannot be executed;  127: not found

See docs/CLI.md for details.
)";

constexpr const char* kSeeAlso =
    "Environment and exit codes: fencelock --help; manual: docs/CLI.md\n";

// -q/--quiet of whichever command was given (one per process).
bool quiet_flag = false;

void add_backend_options(CLI::App* command, std::string& backend, bool& json) {
  command
      ->add_option("--backend", backend,
                   backend_uri_forms() +
                       " (default: $FENCELOCK_BACKEND, then redis://127.0.0.1:6379). Put "
                       "passwords in FENCELOCK_BACKEND or FENCELOCK_REDIS_PASSWORD / "
                       "FENCELOCK_ETCD_PASSWORD / PGPASSWORD: the command line is visible to "
                       "every local user")
      ->type_name("URI");
  command->add_flag("--json", json, "Machine-readable output (see docs/CLI.md)");
  command->add_flag("-q,--quiet", quiet_flag,
                    "Do not warn about risks the URI accepts (allow_stale_leader_revoke=true, "
                    "allow_async_standby=true)");
}

CLI::App* add_run(CLI::App& app, RunArgs& args) {
  CLI::App* run = app.add_subcommand("run", "Hold a lock while a command runs");
  run->footer(
      "fencelock run [OPTIONS] KEY -- CMD [ARGS...]\n\n"
      "Takes the lock KEY, runs CMD with FENCELOCK_KEY, FENCELOCK_TOKEN (the fencing token) and\n"
      "FENCELOCK_BACKEND in its environment, renews the lease while CMD runs and releases it when\n"
      "CMD exits. Exits with CMD's exit code (128+N if signal N killed it). If the lease is lost\n"
      "(or renewals fail until less than min(--kill-grace, TTL/2) of it is left), CMD gets\n"
      "SIGTERM, then SIGKILL after --kill-grace but never after the lease's validity ends, and\n"
      "fencelock exits 73. --grace-outlives-lease lets the grace run past the validity: only for\n"
      "a CMD whose writes are fenced with FENCELOCK_TOKEN. SIGINT, SIGTERM, SIGHUP, SIGQUIT,\n"
      "SIGUSR1 and SIGUSR2 are forwarded to CMD's process group (each followed by SIGCONT).\n"
      "Every process CMD starts is ended with it: the lock is released only when the last one\n"
      "has exited. A guardian process kills CMD's processes when the lease's validity ends\n"
      "even if fencelock itself is stopped, and at once if fencelock is killed; --pid-namespace\n"
      "also catches processes that left CMD's group (setsid) when fencelock is killed.\n\n"
      "Example:\n  fencelock run --ttl 30s --wait 1m reports/nightly -- ./make-report.sh\n\n" +
      std::string(kSeeAlso));
  add_backend_options(run, args.backend, args.json);
  run->add_option("--ttl", args.ttl, "Lease time to live, e.g. 500ms, 10s, 2m")
      ->type_name("DUR")
      ->capture_default_str();
  run->add_option("--wait", args.wait,
                  "How long to wait for a held lock (0: try once, exit 75 if held)")
      ->type_name("DUR")
      ->capture_default_str();
  run->add_option("--kill-grace", args.kill_grace,
                  "After a lost lease, time between SIGTERM and SIGKILL to CMD (cut short at the "
                  "lease's validity)")
      ->type_name("DUR")
      ->capture_default_str();
  run->add_flag("--grace-outlives-lease", args.grace_outlives_lease,
                "Let --kill-grace run past the lease's validity (only with fenced writes)");
  run->add_flag("--pid-namespace", args.pid_namespace,
                "Run CMD as init of a new PID namespace (via unshare): no process of CMD, setsid "
                "or not, outlives fencelock");
  run->add_flag("--pass-secrets", args.pass_secrets,
                "Leave FENCELOCK_REDIS_PASSWORD, FENCELOCK_ETCD_PASSWORD and PGPASSWORD in CMD's "
                "environment (removed by default)");
  run->add_option("--metrics", args.metrics_file,
                  "When run exits, write the client's metrics to FILE (Prometheus text format)")
      ->type_name("FILE");
  run->add_option("KEY", args.key, "Lock name (1..512 bytes)")->required();
  run->add_option("CMD", args.command, "Command and its arguments, after '--'");
  return run;
}

CLI::App* add_status(CLI::App& app, StatusArgs& args) {
  CLI::App* status = app.add_subcommand("status", "Show who holds a lock");
  status->footer(
      "fencelock status [OPTIONS] KEY\n\n"
      "Shows the holder of KEY (owner id prefix, host and pid, fencing token, remaining TTL) or\n"
      "that it is free. Exits 0 either way.\n\n" +
      std::string(kSeeAlso));
  add_backend_options(status, args.backend, args.json);
  status->add_option("KEY", args.key, "Lock name")->required();
  return status;
}

CLI::App* add_list(CLI::App& app, ListArgs& args) {
  CLI::App* list = app.add_subcommand("list", "List held locks");
  list->footer(
      "fencelock list [OPTIONS] [PREFIX]\n\n"
      "Lists the held locks whose key starts with PREFIX (all if omitted), sorted by key.\n\n" +
      std::string(kSeeAlso));
  add_backend_options(list, args.backend, args.json);
  list->add_option("PREFIX", args.prefix, "Key prefix");
  list->add_option("--timeout", args.timeout,
                   "Time for the whole listing, every page of every server (default 10s)");
  list->add_option("--max-locks", args.max_locks,
                   "Fail when more locks than this match (default 100000)");
  return list;
}

CLI::App* add_migrate(CLI::App& app, MigrateArgs& args) {
  CLI::App* migrate = app.add_subcommand("migrate", "Create the backend's schema");
  migrate->footer(
      "fencelock migrate [OPTIONS]\n\n"
      "Creates what the backend needs on its servers (PostgreSQL lease mode: the fencelock_leases\n"
      "table and the fencelock_tokens sequence) and prints the statements it ran. Idempotent.\n"
      "For deployments whose runtime role may not run DDL: run it once with a privileged "
      "role.\n\n" +
      std::string(kSeeAlso));
  add_backend_options(migrate, args.backend, args.json);
  return migrate;
}

CLI::App* add_elect(CLI::App& app, ElectArgs& args) {
  CLI::App* elect = app.add_subcommand("elect", "Campaign for leadership, or observe the leader");
  elect->footer(
      "fencelock elect [OPTIONS] NAME [VALUE]\n"
      "fencelock elect --observe [OPTIONS] NAME\n\n"
      "Campaigns in the election NAME (etcd:// backends only; same keys as 'etcdctl elect') and\n"
      "blocks until elected, then prints one line and stays leader until SIGINT/SIGTERM/SIGHUP/\n"
      "SIGQUIT (resigns, exit 0) or until the leadership is lost (exit 73). VALUE defaults to\n"
      "HOST:PID. --observe prints the leader now and after every change, one line each.\n\n"
      "Example:\n  fencelock elect --backend etcd://127.0.0.1:2379 scheduler node-a:8080\n\n" +
      std::string(kSeeAlso));
  add_backend_options(elect, args.backend, args.json);
  elect->add_flag("--observe", args.observe, "Print the leader and its changes; do not campaign");
  elect->add_option("--ttl", args.ttl, "Session time to live (at least 2s)")
      ->type_name("DUR")
      ->capture_default_str();
  elect
      ->add_option("--wait", args.wait,
                   "How long to wait for the leadership (default: until elected; 0: only if "
                   "nobody leads, exit 75 otherwise)")
      ->type_name("DUR");
  elect->add_option("NAME", args.name, "Election name (1..512 bytes)")->required();
  elect->add_option("VALUE", args.value, "Value the leader proclaims (default HOST:PID)");
  return elect;
}

// `text` broken into lines of at most `width` columns at spaces (a longer word stays whole);
// the first line is shorter by `first_taken` columns.
std::string wrap_words(std::string_view text, std::size_t width, std::size_t first_taken) {
  std::string out;
  std::size_t column = first_taken;
  while (!text.empty()) {
    const std::size_t space = text.find(' ');
    const std::string_view word = text.substr(0, space);
    text = space == std::string_view::npos ? std::string_view() : text.substr(space + 1);
    if (column > 0 && column + 1 + word.size() > width) {
      out += '\n';
      column = 0;
    } else if (column > 0) {
      out += ' ';
      column++;
    }
    out += word;
    column += word.size();
  }
  return out;
}

CLI::App* add_torture(CLI::App& app, TortureArgs& args) {
  CLI::App* torture = app.add_subcommand("torture", "Prove safety under faults (fences, lost())");
  torture->footer(
      "fencelock torture [OPTIONS]\n\n"
      "Starts --workers processes that contend for one lock and increment a shared register\n"
      "through a fence while faults are injected, then checks the history: fenced violations,\n"
      "lost updates, token regressions, mutual exclusion while valid, late or missing lost()\n"
      "must all be 0. Verdict SAFE (exit 0), UNSAFE (exit 1), or INCONCLUSIVE (exit 2: too few\n"
      "grants or writes, a fault that never took effect, a failed control program).\n"
      "Faults:" +
      wrap_words(torture::fault_help() + ".", 90, 7) +
      "\n\n"
      "Example:\n  fencelock torture --backend etcd://127.0.0.1:2379 --duration 1m\n\n"
      "See docs/RELIABILITY.md.\n");
  add_backend_options(torture, args.backend, args.json);
  torture->add_option("--workers", args.workers, "Worker processes")->capture_default_str();
  torture->add_option("--duration", args.duration, "How long to run")
      ->type_name("DUR")
      ->capture_default_str();
  torture->add_option("--faults", args.faults, "Comma-separated faults, or none")
      ->type_name("LIST")
      ->capture_default_str();
  torture->add_option("--ttl", args.ttl, "Lease TTL of the workers")
      ->type_name("DUR")
      ->capture_default_str();
  torture->add_option("--critical", args.critical, "Length of one critical section")
      ->type_name("DUR")
      ->capture_default_str();
  torture->add_option("--work-dir", args.work_dir, "Directory for the workers' logs")
      ->type_name("DIR");
  torture
      ->add_option("--server-control", args.server_control,
                   "For server-kill, minority-stall, admin-delete, evict, failover: PROGRAM "
                   "kill PORT / start / pause PORT / resume PORT / admin-delete KIND KEY / fill "
                   "PORT / failover PORT LAG (scripts/servers.sh)")
      ->type_name("PROGRAM");
  torture
      ->add_option("--extra-leases", args.extra_leases,
                   "For the fault many-leases: long leases each worker holds besides the "
                   "contended one")
      ->capture_default_str();
  torture->add_option("--key", args.key, "The lock the workers contend for")->capture_default_str();
  torture
      ->add_option("--api", args.api,
                   "How the workers call the library: blocking (acquire, release) or async "
                   "(acquire_async, release_async)")
      ->check(CLI::IsMember({"blocking", "async"}))
      ->capture_default_str();
  torture
      ->add_option("--fence", args.fence,
                   "How the register is guarded: full (fenced reads and writes), write-only "
                   "(lost updates must show), none")
      ->check(CLI::IsMember({"full", "write-only", "none"}))
      ->capture_default_str();
  torture->add_flag("--unsafe-no-fence", args.unsafe_no_fence, "The same as --fence none");
  return torture;
}

CLI::App* add_demo(CLI::App& app, DemoArgs& args) {
  CLI::App* demo = app.add_subcommand("demo", "Show a paused holder being fenced off, per backend");
  demo->footer(
      "fencelock demo [--backend URI]...\n\n"
      "For each backend, two workers contend for one lock; the holder is paused past its TTL\n"
      "between its read and its write, the other takes the lock with a larger token and writes,\n"
      "the paused one wakes, ignores lost() and writes with its stale token: the fence refuses\n"
      "it. Without --backend: the servers of scripts/servers.sh ($FENCELOCK_REDIS_URI, ...)\n"
      "when set, else memory:// in this process. scripts/demo.sh starts local servers and runs\n"
      "it on all of them.\n");
  demo->add_option("--backend", args.backends, "A backend URI (repeatable)")->type_name("URI");
  demo->add_flag("--json", args.json, "Also print the table as JSON on stderr");
  return demo;
}

CLI::App* add_bench(CLI::App& app, BenchArgs& args) {
  CLI::App* bench = app.add_subcommand("bench", "Measure fencelock next to the bare driver");
  bench->footer(
      "fencelock bench [OPTIONS] --scenario NAME\n\n"
      "Scenarios: uncontended (and baseline: the same, the bare driver always runs interleaved),\n"
      "contended, throughput (per --lockers value), held (per --leases value), waiters (per\n"
      "--waiters value). Human lines on stdout; --json: one JSON object per result. See\n"
      "docs/BENCHMARKS.md.\n");
  add_backend_options(bench, args.backend, args.json);
  bench
      ->add_option("--scenario", args.scenario,
                   "uncontended, baseline, contended, throughput, held, waiters")
      ->capture_default_str();
  bench->add_option("--duration", args.duration, "Length of each measurement")
      ->type_name("DUR")
      ->capture_default_str();
  // The old spelling, kept working but not shown (group "" hides an option from --help).
  // Not ->excludes("--duration"): CLI11 then prints an empty "Excludes:" under --duration.
  bench->add_option("--seconds", args.seconds, "Length of each measurement in seconds")->group("");
  bench->add_option("--workers", args.workers, "contended: Clients on one key")
      ->capture_default_str();
  bench->add_option("--critical", args.critical, "contended: critical section")
      ->type_name("DUR")
      ->capture_default_str();
  bench->add_option("--lockers", args.lockers, "throughput: concurrent lockers, a list")
      ->type_name("LIST")
      ->capture_default_str();
  bench
      ->add_option("--api", args.api,
                   "throughput: the lockers are threads calling acquire/release (blocking) or "
                   "chains of acquire_async/release_async on the Client's engine (async)")
      ->check(CLI::IsMember({"blocking", "async"}))
      ->capture_default_str();
  bench
      ->add_option("--busy", args.busy,
                   "throughput: processes that keep the CPUs busy beside the lockers")
      ->capture_default_str();
  bench->add_option("--leases", args.leases, "held: leases held, a list")
      ->type_name("LIST")
      ->capture_default_str();
  bench->add_option("--waiters", args.waiters, "waiters: pending acquisitions, a list")
      ->type_name("LIST")
      ->capture_default_str();
  bench->add_option("--ttl", args.ttl, "held, waiters: lease TTL")
      ->type_name("DUR")
      ->capture_default_str();
  return bench;
}

CLI::App* add_torture_worker(CLI::App& app, torture::WorkerArgs& args) {
  CLI::App* worker = app.add_subcommand("torture-worker", "");
  worker->group("");  // internal: started by `fencelock torture`
  worker->add_option("--socket", args.socket)->required();
  worker->add_option("--log", args.log)->required();
  worker->add_option("--id", args.id)->required();
  worker->add_option("--ttl-ms", args.ttl_ms);
  worker->add_option("--critical-ms", args.critical_ms);
  worker->add_option("--key", args.key);
  worker->add_option("--extra-leases", args.extra_leases);
  worker->add_option("--api", args.api)->check(CLI::IsMember({"blocking", "async"}));
  return worker;
}

std::vector<KnownOption> known_options(const CLI::App& app) {
  std::vector<KnownOption> out;
  for (const CLI::Option* option : app.get_options()) {
    KnownOption known;
    for (const std::string& name : option->get_lnames()) known.names.push_back("--" + name);
    for (const std::string& name : option->get_snames()) known.names.push_back("-" + name);
    known.takes_value = option->get_type_size() != 0;
    if (!known.names.empty()) out.push_back(std::move(known));
  }
  return out;
}

// unknown_word() over the commands and options `app` knows.
std::optional<std::string> mistyped_word(CLI::App& app, int argc, char** argv) {
  std::vector<KnownCommand> commands;
  for (const CLI::App* command : app.get_subcommands([](const CLI::App*) { return true; })) {
    commands.push_back(
        {command->get_name(), known_options(*command), command->get_group().empty()});
  }
  return unknown_word(commands, known_options(app),
                      std::vector<std::string>(argv + 1, argv + argc));
}

std::string usage_hint(const CLI::ParseError& error, const CLI::App* selected, bool is_run) {
  std::string hint = selected != nullptr
                         ? fmt::format("see 'fencelock {} --help'", selected->get_name())
                         : "see 'fencelock --help'";
  if (is_run && dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) {
    hint = "put the command after '--' (fencelock run KEY -- CMD ARGS...); " + hint;
  }
  return hint;
}

}  // namespace

int main_with_args(int argc, char** argv) {
  CLI::App app{
      "fencelock: distributed locks with fencing tokens.\n\n"
      "fencelock run [OPTIONS] KEY -- CMD [ARGS...]\n"
      "fencelock status [OPTIONS] KEY\n"
      "fencelock list [OPTIONS] [PREFIX]\n"
      "fencelock elect [OPTIONS] NAME [VALUE]\n"
      "fencelock elect --observe [OPTIONS] NAME\n"
      "fencelock migrate [OPTIONS]\n"
      "fencelock torture [OPTIONS]\n"
      "fencelock demo [--backend URI]...\n"
      "fencelock bench [OPTIONS] --scenario NAME\n",
      "fencelock"};
  app.set_version_flag("--version", FENCELOCK_VERSION);
  app.require_subcommand(1);
  app.footer(kFooter);

  RunArgs run_args;
  StatusArgs status_args;
  ListArgs list_args;
  CLI::App* run = add_run(app, run_args);
  CLI::App* status = add_status(app, status_args);
  CLI::App* list = add_list(app, list_args);
  MigrateArgs migrate_args;
  CLI::App* migrate = add_migrate(app, migrate_args);
  ElectArgs elect_args;
  CLI::App* elect = add_elect(app, elect_args);
  TortureArgs torture_args;
  CLI::App* torture = add_torture(app, torture_args);
  BenchArgs bench_args;
  CLI::App* bench = add_bench(app, bench_args);
  DemoArgs demo_args;
  CLI::App* demo = add_demo(app, demo_args);
  torture::WorkerArgs worker_args;
  CLI::App* worker = add_torture_worker(app, worker_args);

  if (auto word = mistyped_word(app, argc, argv)) {
    std::fputs(fmt::format("fencelock: {}\n", *word).c_str(), stderr);
    return kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    if (error.get_exit_code() == 0) return app.exit(error);  // --help, --version
    const CLI::App* selected = nullptr;
    for (const CLI::App* command : {run, status, list, migrate, elect, torture, demo, bench}) {
      if (command->parsed()) selected = command;
    }
    std::fputs(fmt::format("fencelock: {}; {}\n", terminal_safe(error.what()),
                           usage_hint(error, selected, selected == run))
                   .c_str(),
               stderr);
    return kExitUsage;
  }
  set_quiet_accepted_risks(quiet_flag);
  if (run->parsed()) return run_command(run_args);
  if (status->parsed()) return status_command(status_args);
  if (migrate->parsed()) return migrate_command(migrate_args);
  if (elect->parsed()) return elect_command(elect_args);
  if (torture->parsed()) return torture_command(torture_args);
  if (demo->parsed()) return demo_command(demo_args);
  if (bench->parsed()) {
    if (bench->get_option("--seconds")->count() > 0 &&
        bench->get_option("--duration")->count() > 0) {
      std::fputs(
          "fencelock: --seconds is the old spelling of --duration: give one of them; see "
          "'fencelock bench --help'\n",
          stderr);
      return kExitUsage;
    }
    return bench_command(bench_args);
  }
  if (worker->parsed()) {
    worker_args.backend = choose_backend("").uri;
    return torture_worker_command(worker_args);
  }
  return list_command(list_args);
}

}  // namespace fencelock::cli

// Non-dumpable from the first moment fencelock's own code runs (before main(), and before
// the static constructors of this program), so that the window in which another process of the
// user can read the environment's passwords is the dynamic loader's time only.
__attribute__((constructor(101))) static void not_dumpable_from_the_start() {
  if (const char* keep = std::getenv("FENCELOCK_CORE_DUMPS");
      keep == nullptr || std::string_view(keep) != "1") {
    (void)::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  }
}

int main(int argc, char** argv) try {
  // fencelock holds backend passwords (from the URI or the environment) in its memory: no core
  // dump of it, and no other process of the same user may read its memory or environment
  // (/proc/PID/mem, environ: non-dumpable processes' files belong to root). A review found the
  // Redis password four times in a core of `run`. CMD is dumpable again: execve resets it.
  // FENCELOCK_CORE_DUMPS=1 keeps fencelock dumpable, to debug a crash (docs/CLI.md).
  // (Set again here: the constructor below does it before any other code of fencelock runs.)
  if (const char* keep = std::getenv("FENCELOCK_CORE_DUMPS");
      keep == nullptr || std::string_view(keep) != "1") {
    (void)::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  }
  // A torture worker gets its backend URI and passwords through a pipe (child_processes.h).
  if (argc > 1 && std::string_view(argv[1]) == "torture-worker") {
    fencelock::torture::take_secrets_from_pipe();
  }
  // A write to a server connection the peer closed must fail with EPIPE, not kill fencelock (and
  // leave `run`'s command unsupervised). The command gets the default disposition back.
  std::signal(SIGPIPE, SIG_IGN);
  return fencelock::cli::main_with_args(argc, argv);
} catch (const std::exception& e) {  // one no command caught: an error exit, not std::terminate
  std::fprintf(stderr, "fencelock: internal error: %s\n", e.what());
  return fencelock::cli::kExitSoftware;
}
