#include "cli/horovod_flags.h"

#include <fmt/format.h>

#include <algorithm>
#include <regex>

#include "cli/engine_flags.h"
#include "common/error.h"
#include "contract/env_table.h"
#include "launcher/registry.h"

namespace hvd::cli {
namespace {

void set_knob(Options& o, std::string_view name, std::string value) {
  o.knobs.emplace_back(std::string(name), std::move(value));
}

// The knob, and (when `effective`: the value asks for something libhvd does not do) a warning
// naming the flag and what libhvd does instead.
void set_unimplemented(Options& o, const std::string& flag, std::string_view name,
                       const std::string& value, bool effective = true) {
  set_knob(o, name, value);
  // The last flag for a variable wins (--X then --no-X): so does its warning, or its silence.
  const std::string assignment = fmt::format(" {}=", name);
  std::erase_if(o.warnings,
                [&](const std::string& w) { return w.find(assignment) != std::string::npos; });
  if (!effective) return;
  const contract::UnimplementedKnob* knob = contract::find_unimplemented_knob(name);
  o.warnings.push_back(fmt::format("{}: {}; {}={} is set for the ranks all the same", flag,
                                   knob != nullptr ? knob->instead : "libhvd ignores it", name,
                                   value));
}

// A --X / --no-X pair setting NAME to 1 / 0 (horovodrun's "override" flags).
void on_off_pair(CLI::App& app, Options& o, const std::string& flag, std::string_view name,
                 const std::string& help) {
  app.add_flag_callback(
         "--" + flag, [&o, flag, name] { set_unimplemented(o, "--" + flag, name, "1"); },
         help + " (libhvd lacks it: a warning says so)")
      ->trigger_on_parse();  // the last of --X and --no-X wins, as in horovodrun
  app.add_flag_callback(
         "--no-" + flag,
         [&o, flag, name] { set_unimplemented(o, "--no-" + flag, name, "0", false); }, "")
      ->group("")  // horovodrun's, for autotune: what libhvd does anyway
      ->trigger_on_parse();
}

// An autotune sub-flag: its knob waits for --autotune (finish_horovod_flags).
void autotune_value(CLI::App& app, Options& o, const std::string& flag, std::string_view name,
                    double min, double max, bool whole, const std::string& help) {
  app.add_option_function<std::string>(
         "--" + flag,
         [&o, flag, name, min, max, whole](const std::string& v) {
           const std::string value =
               whole ? std::to_string(parse_whole("--" + flag, v, static_cast<long long>(min),
                                                  static_cast<long long>(max), name))
                     : fmt::format("{}", parse_number("--" + flag, v, min, max, name, "0.8"));
           o.autotune_knobs.emplace_back(std::string(name), value);
           o.autotune_flags.push_back("--" + flag);
         },
         help + " (with --autotune; libhvd has no autotuner)")
      ->type_name(whole ? "N" : "X");
}

// HOROVOD_THREAD_AFFINITY as Horovod reads it: core ids, one per local rank, comma-separated.
std::string thread_affinity(const std::string& v) {
  static const std::regex kCores("[0-9]{1,5}(,[0-9]{1,5})*");
  if (!std::regex_match(v, kCores)) {
    throw UsageError(fmt::format("--thread-affinity {}: not a list of core ids", v),
                     "e.g. --thread-affinity 0,8 (Horovod reads one core id per local rank)");
  }
  return v;
}

void define_tuning_flags(CLI::App& app, Options& o) {
  on_off_pair(app, o, "hierarchical-allreduce", "HOROVOD_HIERARCHICAL_ALLREDUCE",
              "horovodrun's hierarchical allreduce");
  on_off_pair(app, o, "hierarchical-allgather", "HOROVOD_HIERARCHICAL_ALLGATHER",
              "horovodrun's hierarchical allgather");
  on_off_pair(app, o, "torus-allreduce", "HOROVOD_TORUS_ALLREDUCE", "horovodrun's torus allreduce");
  app.add_flag_callback(
         "--autotune", [&o] { o.autotune = true; },
         "horovodrun's autotuner (libhvd has none: a warning says so)")
      ->trigger_on_parse();
  app.add_flag_callback(
         "--no-autotune", [&o] { o.autotune = false; }, "")
      ->group("")
      ->trigger_on_parse();
  app.add_option_function<std::string>(
         "--autotune-log-file",
         [&o](const std::string& v) {
           o.autotune_knobs.emplace_back("HOROVOD_AUTOTUNE_LOG", v);
           o.autotune_flags.emplace_back("--autotune-log-file");
         },
         "horovodrun's autotune log (with --autotune; libhvd has no autotuner)")
      ->type_name("FILE");
  autotune_value(app, o, "autotune-warmup-samples", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", 0, 1e6, true,
                 "horovodrun's autotune warm-up samples");
  autotune_value(app, o, "autotune-steps-per-sample", "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", 0, 1e6,
                 true, "horovodrun's autotune steps per sample");
  autotune_value(app, o, "autotune-bayes-opt-max-samples", "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES",
                 0, 1e6, true, "horovodrun's autotune sample limit");
  autotune_value(app, o, "autotune-gaussian-process-noise",
                 "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", 0, 1, false,
                 "horovodrun's autotune noise, 0 to 1");
  app.add_flag("--timeline-mark-cycles", o.timeline_mark_cycles,
               "Mark each negotiation cycle in the timeline (CYCLE_START; with "
               "--timeline-filename, as in horovodrun)");
  app.add_flag_callback(
         "--stall-check", [&o] { set_knob(o, contract::kStallCheckDisable.name, "0"); }, "")
      ->group("")  // horovodrun's hidden opposite of --no-stall-check
      ->trigger_on_parse();
}

void define_library_flags(CLI::App& app, Options& o) {
  app.add_flag_callback(
      "--mpi-threads-disable",
      [&o] { set_unimplemented(o, "--mpi-threads-disable", "HOROVOD_MPI_THREADS_DISABLE", "1"); },
      "horovodrun's MPI_THREAD_SINGLE (libhvd needs MPI_THREAD_MULTIPLE: a warning says so)");
  app.add_flag_callback(
      "--tcp", [&o] { set_knob(o, contract::kNcclIbDisable.name, "1"); },
      "NCCL over TCP sockets, not InfiniBand: sets NCCL_IB_DISABLE=1 for every rank");
  app.add_option("--binding-args", o.binding_args,
                 "With --mpi: mpirun's binding options instead of hvdrun's '-bind-to none "
                 "-map-by slot', split on spaces")
      ->type_name("ARGS");
  app.add_option_function<std::string>(
         "--num-nccl-streams",
         [&o](const std::string& v) {
           const long long n =
               parse_whole("--num-nccl-streams", v, 1, 64, "HOROVOD_NUM_NCCL_STREAMS");
           set_unimplemented(o, "--num-nccl-streams", "HOROVOD_NUM_NCCL_STREAMS", std::to_string(n),
                             n != 1);
         },
         "horovodrun's NCCL streams per rank (libhvd uses one: a warning says so for more)")
      ->type_name("N");
  app.add_option_function<std::string>(
         "--thread-affinity",
         [&o](const std::string& v) {
           set_unimplemented(o, "--thread-affinity", "HOROVOD_THREAD_AFFINITY", thread_affinity(v));
         },
         "horovodrun's engine thread pinning, core ids per local rank (libhvd does not pin: "
         "a warning says so)")
      ->type_name("CORES");
  app.add_option_function<std::string>(
         "--gloo-timeout-seconds",
         [&o](const std::string& v) {
           set_knob(o, contract::kGlooTimeout.name,
                    std::to_string(parse_whole("--gloo-timeout-seconds", v, 1, 86400,
                                               contract::kGlooTimeout.name)));
         },
         "libhvd: seconds a Gloo rendezvous or collective may wait for a peer, and the whole "
         "of hvd::init() for the other ranks, with a margin (default 30)")
      ->type_name("SECONDS");
  app.add_flag_callback(
      "--disable-cache", [] {},
      "horovodrun's: hvdrun keeps no cache of SSH or network checks, so every launch checks "
      "anew (accepted, no effect)");
  app.add_flag_callback(
      "--jsrun",
      [] {
        throw UsageError("--jsrun: hvdrun has no IBM LSF (jsrun) launcher",
                         "launch over SSH (the default) or through mpirun (--mpi) on the LSF "
                         "hosts, given with -H or --hostfile");
      },
      "horovodrun's LSF launcher: refused, hvdrun has none");
}

void define_logging_flags(CLI::App& app, Options& o) {
  auto hide = [&o](const std::string& flag) {
    return [&o, flag] { set_unimplemented(o, flag, "HOROVOD_LOG_HIDE_TIME", "1", false); };
  };
  auto show = [&o](const std::string& flag) {
    return [&o, flag] { set_unimplemented(o, flag, "HOROVOD_LOG_HIDE_TIME", "0"); };
  };
  app.add_flag_callback("--log-without-timestamp", hide("--log-without-timestamp"),
                        "libhvd's log lines without a time (as they are anyway)")
      ->trigger_on_parse();
  for (const char* flag : {"--log-with-timestamp", "--no-log-hide-timestamp"}) {
    app.add_flag_callback(flag, show(flag), "")->group("")->trigger_on_parse();
  }
  app.add_flag_callback("--log-hide-timestamp", hide("--log-hide-timestamp"), "")
      ->group("")
      ->trigger_on_parse();
  app.add_flag("--timestamp-output,--prefix-output-with-timestamp", o.timestamp_output,
               "Put the wall-clock time in front of every rank's line, as mpirun does (also "
               "-prefix-timestamp)");
  app.add_flag_callback(
      "--no-tag-output", [&o] { o.tag_output = false; },
      "Print the ranks' lines as they wrote them, without the [1,RANK]<stdout>: tag");
  app.add_option("--output-ranks", o.output_ranks,
                 "Only these ranks' lines reach the console (0,3-5); all still go to "
                 "--output-filename, and a failed rank's last stderr lines are still shown")
      ->type_name("LIST");
}

}  // namespace

void define_horovod_flags(CLI::App& app, Options& o) {
  define_tuning_flags(app, o);
  define_library_flags(app, o);
  define_logging_flags(app, o);
}

void finish_horovod_flags(Options& o) {
  if (o.autotune) {
    set_unimplemented(o, "--autotune", "HOROVOD_AUTOTUNE", "1");
    o.knobs.insert(o.knobs.end(), o.autotune_knobs.begin(), o.autotune_knobs.end());
  } else if (!o.autotune_flags.empty()) {
    o.warnings.push_back(fmt::format("{}: has no effect without --autotune (as in horovodrun)",
                                     o.autotune_flags.front()));
  }
  if (o.timeline_mark_cycles) {
    const bool timeline = std::any_of(o.knobs.begin(), o.knobs.end(), [](const auto& k) {
      return k.first == contract::kTimeline.name;
    });
    if (timeline) {
      set_knob(o, contract::kTimelineMarkCycles.name, "1");
    } else {
      o.warnings.emplace_back(
          "--timeline-mark-cycles: has no effect without --timeline-filename (as in "
          "horovodrun)");
    }
  }
  if (o.binding_args) {
    if (const launcher::Refusal* r =
            launcher::refusal(o.launcher, launcher::Capability::kBindingArgs)) {
      o.warnings.emplace_back(r->what);
    }
  }
  // A flag given twice warns once.
  std::vector<std::string> seen;
  for (std::string& w : o.warnings) {
    if (std::find(seen.begin(), seen.end(), w) == seen.end()) seen.push_back(std::move(w));
  }
  o.warnings = std::move(seen);
}

}  // namespace hvd::cli
