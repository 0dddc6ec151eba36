// hvd._native: the thin glue between Python and libhvd's public C++ API (hvd/hvd.hpp).
//
// Tensors cross by pointer: the Python layer passes data_ptr(), a libhvd dtype code and the
// shape, and keeps the tensor alive until the op finished (its handle map). Nothing here touches
// torch, so no libhvd thread ever needs the GIL: outputs whose size is known only during the op
// (allgather, reducescatter, alltoall) land in the op's own Buffer, which Python takes afterwards
// (Handle.take_output) and wraps without a copy through the buffer protocol.
//
// The GIL is released for every call that may wait on libhvd (init, submissions, waits, barrier,
// shutdown). A wait wakes every 100 ms to run Python's signal handlers, so Ctrl-C raises
// KeyboardInterrupt in a rank stuck in a collective, or in add_process_set/remove_process_set
// (libhvd calls python_interrupted() as often).
//
// Errors: hvd::RuntimeError becomes hvd._native.HvdError (a RuntimeError) with `.status`, the
// hvd_status code, and `.status_name`; the Python layer maps it to Horovod's exception types.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "hvd/elastic.hpp"
#include "hvd/hvd.h"
#include "hvd/hvd.hpp"

namespace py = pybind11;

namespace {

// A wait slice: how often a waiting rank looks at Python's signals.
constexpr std::chrono::milliseconds kSignalCheck{100};

PyObject* g_error = nullptr;  // hvd._native.HvdError, owned by the module

void raise_hvd_error(const hvd::RuntimeError& e) {
  py::object error = py::reinterpret_borrow<py::object>(g_error)(py::str(e.what()));
  error.attr("status") = static_cast<int>(e.status());
  error.attr("status_name") = hvd_status_name(e.status());
  PyErr_SetObject(g_error, error.ptr());
}

hvd::Device device_of(int device) {
  return device < 0 ? hvd::Device::cpu() : hvd::Device::cuda(device);
}

// A view of the caller's memory. `stream` is a cudaStream_t (0: the default stream).
hvd::Tensor view(std::uintptr_t data, int dtype, std::vector<std::int64_t> shape, int device,
                 std::uintptr_t stream) {
  return hvd::Tensor{reinterpret_cast<void*>(data), static_cast<hvd::DataType>(dtype),
                     std::move(shape), device_of(device), reinterpret_cast<void*>(stream)};
}

// Waits for `handle` with the GIL released, waking every kSignalCheck for Python's signals
// (a KeyboardInterrupt leaves the op in flight: its tensors must stay alive).
void wait_for_op(const hvd::Handle& handle) {
  for (;;) {
    bool done = false;
    {
      py::gil_scoped_release unlocked;
      done = handle.wait(kSignalCheck);
    }
    if (done) return;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

// hvd::Interrupted for a call made with the GIL released: runs Python's signal handlers; true
// when one raised (KeyboardInterrupt), which stays set for interruptible() to raise.
bool python_interrupted() {
  py::gil_scoped_acquire locked;
  return PyErr_CheckSignals() != 0;
}

// Runs `call` with the GIL released; when it gave up because python_interrupted() said so, the
// Python exception the signal handler raised instead of libhvd's error.
template <class F>
auto interruptible(F&& call) {
  try {
    py::gil_scoped_release unlocked;
    return call();
  } catch (const hvd::RuntimeError&) {
    if (PyErr_Occurred() != nullptr) throw py::error_already_set();
    throw;
  }
}

// Runs `submit` with the GIL released (submission takes libhvd's engine lock).
template <class F>
hvd::Handle submit(F&& f) {
  py::gil_scoped_release unlocked;
  return f();
}

template <class F>
std::vector<hvd::Handle> submit_group(F&& f) {
  py::gil_scoped_release unlocked;
  return f();
}

// A grouped op's member as Python passes it (grouped_*_async below).
using Member = std::tuple<std::uintptr_t, int, std::vector<std::int64_t>, int, std::uintptr_t>;
using AllreduceMember =
    std::tuple<std::uintptr_t, std::uintptr_t, int, std::vector<std::int64_t>, int, std::uintptr_t>;

// The JSON of hvd_build_report(): what this libhvd was built with and what loads here.
std::string build_report() {
  std::string text(4096, '\0');
  std::size_t need = hvd_build_report(text.data(), text.size());
  if (need >= text.size()) {
    text.assign(need + 1, '\0');
    need = hvd_build_report(text.data(), text.size());
  }
  text.resize(need == 0 ? 0 : std::strlen(text.c_str()));
  return text;
}

void define_handle(py::module_& m) {
  py::class_<hvd::Handle>(m, "Handle", "The pending result of an async op (libhvd's hvd::Handle).")
      .def_property_readonly("name", &hvd::Handle::name)
      .def("poll", &hvd::Handle::poll, "True once the op finished (successfully or not).")
      .def("wait", &wait_for_op,
           "Blocks until the op finished (GIL released; signals checked every 100 ms); raises "
           "HvdError if it failed.")
      .def("take_output", &hvd::Handle::take_output,
           "The op's output Buffer (allgather, reducescatter, alltoall), moved out of the op.")
      .def("received_splits", &hvd::Handle::received_splits,
           "alltoall: the rows received from each rank.");

  // libhvd's owning Buffer, exported through the buffer protocol as writable bytes:
  // torch.frombuffer(buffer) keeps this object alive as long as the tensor lives.
  py::class_<hvd::Buffer>(m, "Buffer", py::buffer_protocol())
      .def_property_readonly("shape", [](const hvd::Buffer& b) { return b.shape; })
      .def_property_readonly("nbytes", [](const hvd::Buffer& b) { return b.bytes.size(); })
      .def_buffer([](hvd::Buffer& b) {
        return py::buffer_info(b.bytes.data(), 1, py::format_descriptor<std::uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(b.bytes.size())}, {1}, false);
      });
}

void define_topology(py::module_& m) {
  m.def(
      "init",
      [](std::vector<std::vector<int>> process_sets, bool dynamic) {
        py::gil_scoped_release unlocked;
        hvd::init(hvd::InitOptions{std::move(process_sets), dynamic});
      },
      py::arg("process_sets") = std::vector<std::vector<int>>{}, py::arg("dynamic") = false);
  m.def("shutdown", [] {
    py::gil_scoped_release unlocked;
    hvd::shutdown();
  });
  m.def("is_initialized", &hvd::is_initialized);
  m.def("rank", &hvd::rank);
  m.def("size", &hvd::size);
  m.def("local_rank", &hvd::local_rank);
  m.def("local_size", &hvd::local_size);
  m.def("cross_rank", &hvd::cross_rank);
  m.def("cross_size", &hvd::cross_size);
  m.def("backend_name", &hvd::backend_name);
  m.def("gpu_device", &hvd::gpu_device);
  m.def("build_report", &build_report, "hvd_build_report() as JSON text (needs no init).");
  // Process sets by id (hvd::ProcessSet); adding and removing are collectives over every rank.
  // Interruptible (python_interrupted): Ctrl-C in a rank that waits for the others to make the
  // same call raises KeyboardInterrupt there, and libhvd shuts down on that rank (hvd.hpp).
  m.def("add_process_set", [](std::vector<int> ranks) {
    return interruptible([&] { return hvd::add_process_set(ranks, python_interrupted).id(); });
  });
  m.def("remove_process_set", [](int id) {
    interruptible([&] {
      hvd::remove_process_set(hvd::ProcessSet(id), python_interrupted);
      return 0;
    });
  });
  m.def("join", [] {
    py::gil_scoped_release unlocked;
    return hvd::join();
  });
  m.def("process_set_ids", [] {
    std::vector<int> ids;
    for (const hvd::ProcessSet& s : hvd::process_sets()) ids.push_back(s.id());
    return ids;
  });
  m.def("process_set_ranks", [](int id) { return hvd::ProcessSet(id).ranks(); });
  m.def("process_set_rank", [](int id) { return hvd::ProcessSet(id).rank(); });
  m.def("process_set_size", [](int id) { return hvd::ProcessSet(id).size(); });
  // What libhvd's engine of a set did on this rank (hvd::EngineStats), for tests and benchmarks.
  m.def(
      "engine_stats",
      [](int process_set) {
        const hvd::EngineStats s = hvd::engine_stats(hvd::ProcessSet(process_set));
        py::dict d;
        d["cycles"] = s.cycles;
        d["cache_hits"] = s.cache_hits;
        d["negotiated"] = s.negotiated;
        d["doorbells"] = s.doorbells;
        d["decided_by_bits"] = s.decided_by_bits;
        d["eager"] = s.eager;
        d["responses"] = s.responses;
        return d;
      },
      py::arg("process_set") = 0);
}

void define_ops(py::module_& m) {
  m.def(
      "allreduce_async",
      [](const std::string& name, std::uintptr_t in, std::uintptr_t out, int dtype,
         std::vector<std::int64_t> shape, int device, std::uintptr_t stream, int op,
         double prescale, double postscale, int process_set) {
        hvd::Tensor input = view(in, dtype, std::move(shape), device, stream);
        hvd::Tensor output = input;
        output.data = reinterpret_cast<void*>(out);
        const hvd::AllreduceOptions options{static_cast<hvd::ReduceOp>(op), prescale, postscale};
        const hvd::ProcessSet set(process_set);
        return submit([&] { return hvd::allreduce_async(name, input, output, options, set); });
      },
      py::arg("name"), py::arg("input"), py::arg("output"), py::arg("dtype"), py::arg("shape"),
      py::arg("device"), py::arg("stream"), py::arg("op"), py::arg("prescale"),
      py::arg("postscale"), py::arg("process_set") = 0);
  m.def(
      "broadcast_async",
      [](const std::string& name, std::uintptr_t data, int dtype, std::vector<std::int64_t> shape,
         int device, std::uintptr_t stream, int root, int process_set) {
        const hvd::Tensor t = view(data, dtype, std::move(shape), device, stream);
        return submit(
            [&] { return hvd::broadcast_async(name, t, root, hvd::ProcessSet(process_set)); });
      },
      py::arg("name"), py::arg("data"), py::arg("dtype"), py::arg("shape"), py::arg("device"),
      py::arg("stream"), py::arg("root"), py::arg("process_set") = 0);
  m.def(
      "allgather_async",
      [](const std::string& name, std::uintptr_t data, int dtype, std::vector<std::int64_t> shape,
         int device, std::uintptr_t stream, int process_set) {
        const hvd::Tensor t = view(data, dtype, std::move(shape), device, stream);
        return submit([&] { return hvd::allgather_async(name, t, hvd::ProcessSet(process_set)); });
      },
      py::arg("name"), py::arg("data"), py::arg("dtype"), py::arg("shape"), py::arg("device"),
      py::arg("stream"), py::arg("process_set") = 0);
  m.def(
      "reducescatter_async",
      [](const std::string& name, std::uintptr_t data, int dtype, std::vector<std::int64_t> shape,
         int device, std::uintptr_t stream, int op, double prescale, double postscale,
         int process_set) {
        const hvd::Tensor t = view(data, dtype, std::move(shape), device, stream);
        return submit([&] {
          return hvd::reducescatter_async(name, t, static_cast<hvd::ReduceOp>(op), prescale,
                                          postscale, hvd::ProcessSet(process_set));
        });
      },
      py::arg("name"), py::arg("input"), py::arg("dtype"), py::arg("shape"), py::arg("device"),
      py::arg("stream"), py::arg("op"), py::arg("prescale"), py::arg("postscale"),
      py::arg("process_set") = 0);
  m.def(
      "alltoall_async",
      [](const std::string& name, std::uintptr_t data, int dtype, std::vector<std::int64_t> shape,
         int device, std::uintptr_t stream, std::vector<std::int64_t> splits, int process_set) {
        const hvd::Tensor t = view(data, dtype, std::move(shape), device, stream);
        return submit(
            [&] { return hvd::alltoall_async(name, t, splits, hvd::ProcessSet(process_set)); });
      },
      py::arg("name"), py::arg("data"), py::arg("dtype"), py::arg("shape"), py::arg("device"),
      py::arg("stream"), py::arg("splits"), py::arg("process_set") = 0);
  // Grouped ops (hvd::grouped_*_async): one group, negotiated and run as one unit; member i is
  // the op "<name>_<i+1>of<n>". Each member is a tuple: (input, output, dtype, shape, device,
  // stream) for allreduce, (data, dtype, shape, device, stream) for the others.
  m.def(
      "grouped_allreduce_async",
      [](const std::string& name, const std::vector<AllreduceMember>& members, int op,
         double prescale, double postscale, int process_set) {
        std::vector<hvd::Tensor> in, out;
        for (const auto& [data, output, dtype, shape, device, stream] : members) {
          in.push_back(view(data, dtype, shape, device, stream));
          out.push_back(in.back());
          out.back().data = reinterpret_cast<void*>(output);
        }
        const hvd::AllreduceOptions options{static_cast<hvd::ReduceOp>(op), prescale, postscale};
        return submit_group([&] {
          return hvd::grouped_allreduce_async(name, in, out, options, hvd::ProcessSet(process_set));
        });
      },
      py::arg("name"), py::arg("members"), py::arg("op"), py::arg("prescale"), py::arg("postscale"),
      py::arg("process_set") = 0);
  m.def(
      "grouped_allgather_async",
      [](const std::string& name, const std::vector<Member>& members, int process_set) {
        std::vector<hvd::Tensor> in;
        for (const auto& [data, dtype, shape, device, stream] : members) {
          in.push_back(view(data, dtype, shape, device, stream));
        }
        return submit_group(
            [&] { return hvd::grouped_allgather_async(name, in, hvd::ProcessSet(process_set)); });
      },
      py::arg("name"), py::arg("members"), py::arg("process_set") = 0);
  m.def(
      "grouped_reducescatter_async",
      [](const std::string& name, const std::vector<Member>& members, int op, double prescale,
         double postscale, int process_set) {
        std::vector<hvd::Tensor> in;
        for (const auto& [data, dtype, shape, device, stream] : members) {
          in.push_back(view(data, dtype, shape, device, stream));
        }
        return submit_group([&] {
          return hvd::grouped_reducescatter_async(name, in, static_cast<hvd::ReduceOp>(op),
                                                  prescale, postscale,
                                                  hvd::ProcessSet(process_set));
        });
      },
      py::arg("name"), py::arg("members"), py::arg("op"), py::arg("prescale"), py::arg("postscale"),
      py::arg("process_set") = 0);
  // The C++ API's own cost, for bench/python_allreduce_bench.py: `iterations` allreduces (sum,
  // in place, float32) of `count` floats at `data` under one name, each waited for at once (what
  // hvd.allreduce_(t, name=...) does from Python), timed in C++.
  m.def("bench_cpp_allreduce", [](std::uintptr_t data, std::size_t count, int iterations) {
    py::gil_scoped_release unlocked;
    const hvd::Tensor t = hvd::tensor(reinterpret_cast<float*>(data), count);
    const hvd::AllreduceOptions sum{hvd::ReduceOp::kSum};
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) hvd::allreduce_async("bench.cpp", t, sum).wait();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  });
  m.def(
      "barrier",
      [](int process_set) {
        py::gil_scoped_release unlocked;
        hvd::barrier(hvd::ProcessSet(process_set));
      },
      py::arg("process_set") = 0);
  // stop_timeline waits for rank 0's writer to finish the file; start_timeline for the file it
  // replaces.
  m.def("start_timeline", [](const std::string& path, bool mark_cycles) {
    py::gil_scoped_release unlocked;
    hvd::start_timeline(path, mark_cycles);
  });
  m.def("stop_timeline", [] {
    py::gil_scoped_release unlocked;
    hvd::stop_timeline();
  });
}

// hvd.elastic: libhvd's elastic loop (hvd::elastic::run) driving a Python State object
// (hvd.common.elastic.State) and the Python function that hvd.elastic.run decorates. The loop
// runs with the GIL released; each call into Python takes it. Python exceptions that mean "reset"
// cross back into libhvd's types: HostsUpdatedInterrupt, and HorovodInternalError from an op
// whose status was HVD_ERR_PEER_LOST (hvd.common.errors keeps the status on it). Any other
// Python exception ends the loop and is raised again as it was.
class PyState final : public hvd::elastic::State {
 public:
  explicit PyState(py::object state)
      : state_(std::move(state)), seen_resets_(hvd::elastic::world().resets) {
    py::module_ exceptions = py::module_::import("hvd.common.exceptions");
    hosts_updated_ = exceptions.attr("HostsUpdatedInterrupt");
    internal_error_ = exceptions.attr("HorovodInternalError");
  }

  void save() override {
    call([&] { state_.attr("save")(); });
  }
  void restore() override {
    call([&] { state_.attr("restore")(); });
  }
  // After a reset, Horovod's on_reset (the state's reset() and the registered callbacks) runs
  // before the state is synchronised.
  void sync() override {
    const int resets = hvd::elastic::world().resets;
    call([&] {
      if (resets != seen_resets_) {
        seen_resets_ = resets;
        state_.attr("on_reset")();
      }
      state_.attr("sync")();
    });
  }
  void run_fn(const py::object& fn) {
    call([&] { fn(); });
  }

  // The Python exception that ended the loop, raised again by elastic_run.
  std::optional<py::error_already_set> raised;

 private:
  struct PythonRaised {};  // the exception waits in `raised`

  template <class F>
  void call(F&& f) {
    py::gil_scoped_acquire gil;
    try {
      f();
    } catch (py::error_already_set& e) {
      if (e.matches(hosts_updated_)) throw hvd::elastic::HostsUpdatedInterrupt();
      if (e.matches(internal_error_)) {
        const py::object status = py::getattr(e.value(), "hvd_status", py::none());
        if (!status.is_none() && status.cast<int>() == HVD_ERR_PEER_LOST) {
          throw hvd::RuntimeError(HVD_ERR_PEER_LOST, py::str(e.value()).cast<std::string>());
        }
      }
      raised.emplace(std::move(e));
      throw PythonRaised{};
    }
  }

  py::object state_;
  py::object hosts_updated_;
  py::object internal_error_;
  int seen_resets_;
};

// A State with nothing in it, for check_host_updates() called from Python's State.
struct NoState final : hvd::elastic::State {
  void save() override {}
  void restore() override {}
  void sync() override {}
};

void define_elastic(py::module_& m) {
  m.def("elastic_run", [](py::object state, py::object fn) {
    PyState s(std::move(state));
    try {
      py::gil_scoped_release unlocked;
      hvd::elastic::run(s, [&] { s.run_fn(fn); });
    } catch (...) {
      if (!s.raised) throw;  // libhvd's own error (a reset that could not be done)
    }
    if (s.raised) throw std::move(*s.raised);
  });
  m.def("elastic_check_host_updates", [] {
    py::gil_scoped_release unlocked;
    NoState().check_host_updates();
  });
  m.def("elastic_world", [] {
    const bool enabled = hvd::elastic::enabled();
    const hvd::elastic::WorldInfo w = hvd::elastic::world();
    py::dict d;
    d["enabled"] = enabled;
    d["generation"] = w.generation;
    d["worker"] = w.worker;
    d["sync_root"] = w.sync_root;
    d["resets"] = w.resets;
    return d;
  });
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "libhvd's public C++ API for hvd.torch (internal: use hvd.torch or horovod.torch)";
  g_error = PyErr_NewExceptionWithDoc("hvd._native.HvdError",
                                      "A libhvd error: .status is its hvd_status code.",
                                      PyExc_RuntimeError, nullptr);
  m.add_object("HvdError", py::handle(g_error));
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const hvd::RuntimeError& e) {
      raise_hvd_error(e);
    } catch (const hvd::elastic::HostsUpdatedInterrupt&) {
      const py::object type =
          py::module_::import("hvd.common.exceptions").attr("HostsUpdatedInterrupt");
      PyErr_SetObject(type.ptr(), type().ptr());
    }
  });
  define_handle(m);
  define_topology(m);
  define_ops(m);
  define_elastic(m);

  // libhvd's codes, for the Python layer's tables.
  py::dict dtypes;
  for (auto [name, code] : {std::pair{"uint8", HVD_UINT8},
                            {"int8", HVD_INT8},
                            {"int16", HVD_INT16},
                            {"int32", HVD_INT32},
                            {"int64", HVD_INT64},
                            {"float16", HVD_FLOAT16},
                            {"bfloat16", HVD_BFLOAT16},
                            {"float32", HVD_FLOAT32},
                            {"float64", HVD_FLOAT64}}) {
    dtypes[name] = static_cast<int>(code);
  }
  m.attr("DTYPES") = dtypes;
  py::dict ops;
  for (auto [name, code] : {std::pair{"sum", HVD_SUM},
                            {"average", HVD_AVERAGE},
                            {"min", HVD_MIN},
                            {"max", HVD_MAX},
                            {"product", HVD_PRODUCT}}) {
    ops[name] = static_cast<int>(code);
  }
  m.attr("OPS") = ops;
  py::dict statuses;
  for (int s = HVD_OK; s <= HVD_ERR_REMOVED; ++s) {
    statuses[hvd_status_name(static_cast<hvd_status>(s))] = s;
  }
  m.attr("STATUSES") = statuses;
}
