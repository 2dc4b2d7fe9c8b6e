// Push+pull through shared memory (common/transport/shm/shm_segment.h) between two
// processes, the way the "shm" transport will move tensors: the tensor's bytes
// go through a segment, a ZeroMQ ipc DEALER/ROUTER pair carries only the
// descriptors. Beside it, memcpy of the same size measured in the same run.
//
// One round, for a tensor of SIZE bytes split into chunks of --chunk-mib:
//   worker: for each chunk, take a slot, copy the gradient chunk into it,
//           publish it, send the descriptor (all chunks in flight at once);
//   server: open each pushed descriptor and read the slot in place (where the
//           update would read the gradient), release it; take a slot of its
//           own, copy that chunk of its weights into it, reply its descriptor;
//   worker: open each reply, copy the weights into its model (or, with
//           --worker-reads in-place, only read them there), release.
// So a round makes three copies of SIZE (two with in-place), overlapped
// across the two processes chunk by chunk.
//   GB/s per worker = 2 * SIZE / round time     (GB = 1e9 bytes), as bench_pushpull
//   memcpy          = SIZE / time of one memcpy of SIZE bytes between two warm
//                     buffers in this process (the host's copy bandwidth)
//   worker cpu, server cpu = CPU time / wall time of that process over the
//                     timed rounds: well under 100% means the processes
//                     waited for a core (a loaded machine), not for memory
// --stream-copies fills slots with shm_stream_copy (streaming stores).
// Each figure is the median over --trials alternating memcpy/shm measurements,
// each the median round of many (two warm-up rounds not counted). Contents
// are checked outside the timed rounds (#wrong column: chunks that arrived
// wrong, either way).
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/base/errors.h"
#include "common/base/json_line.h"
#include "common/transport/shm/shm_segment.h"
#include "common/transport/transport.h"
#include "tools/bench/processes.h"
#include "common/transport/zmq/zmq_socket.h"

using namespace pstrain;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::vector<double> sizes_mib{1, 4, 16, 64};
  double chunk_mib = 1;
  int rounds = 0, trials = 3;
  std::string worker_reads = "copy", json;
  bool stream_copies = false;  // fill slots with shm_stream_copy instead of memcpy
};

// CPU seconds this process has used.
double cpu_s() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

struct Result {
  double size_mib = 0, chunk_mib = 0, round_ms = 0, gbps = 0, memcpy_gbps = 0;
  double worker_cpu = 0, server_cpu = 0;  // CPU time / wall time over the timed rounds
  int wrong = 0;
};

std::byte pattern(std::size_t i, unsigned seed) { return static_cast<std::byte>((i * 131 + seed) & 0xff); }

// Messages on the ZeroMQ pair: round (u32), chunk (u32), flag (u32: in a
// reply, 1 when the pushed chunk arrived intact, checked in warm-up rounds),
// then the slot's descriptor. A hello carries the segment's address.
constexpr std::size_t kNoteBytes = 12 + kShmDescriptorBytes;
struct Note {
  std::uint32_t round = 0, chunk = 0, flag = 0;
  ShmDescriptor descriptor;
};
zmq::message_t encode_note(const Note& n) {
  zmq::message_t m(kNoteBytes);
  auto* out = static_cast<std::byte*>(m.data());
  std::memcpy(out, &n.round, 4);
  std::memcpy(out + 4, &n.chunk, 4);
  std::memcpy(out + 8, &n.flag, 4);
  const auto d = encode_shm_descriptor(n.descriptor);
  std::memcpy(out + 12, d.data(), d.size());
  return m;
}
Note decode_note(const zmq::message_t& m) {
  if (m.size() != kNoteBytes) throw ProtocolError("bench_shm: a note of " + std::to_string(m.size()) + " bytes");
  const auto* in = static_cast<const std::byte*>(m.data());
  Note n;
  std::memcpy(&n.round, in, 4);
  std::memcpy(&n.chunk, in + 4, 4);
  std::memcpy(&n.flag, in + 8, 4);
  n.descriptor = decode_shm_descriptor(std::span(in + 12, kShmDescriptorBytes));
  return n;
}

// Receives one message, checking every second that the segment's peer lives
// (a killed peer ends the bench with its error instead of a hang).
zmq::message_t receive(zmq::socket_t& socket, const ShmSegment* segment) {
  for (;;) {
    zmq::message_t m;
    if (socket.recv(m)) return m;
    if (segment != nullptr) segment->check_peer();
  }
}

struct Plan {
  std::size_t num_bytes = 0, chunk_bytes = 0, chunks = 0;
  int rounds = 0;
  bool copy_out = true;
  bool stream = false;
  void copy_in(void* to, const void* from, std::size_t n) const {
    if (stream) {
      shm_stream_copy(to, from, n);
    } else {
      std::memcpy(to, from, n);
    }
  }
  std::size_t size_of(std::size_t c) const { return std::min(chunk_bytes, num_bytes - c * chunk_bytes); }
};

int run_server(const Plan& p, const bench::LinePipe& endpoint_pipe) {
  std::vector<std::byte> weights(p.num_bytes);
  for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = pattern(i, 5);
  zmq::context_t ctx;
  zmq::socket_t router = make_socket(ctx, zmq::socket_type::router);
  router.set(zmq::sockopt::rcvtimeo, 1000);
  if (!endpoint_pipe.write_line(bind_socket(router, "ipc:///tmp/pstrain-bench-shm-" + std::to_string(getpid())))) {
    return 1;
  }
  zmq::message_t id = receive(router, nullptr), hello = receive(router, nullptr);
  const auto segment =
      ShmSegment::attach(decode_shm_address(std::span(static_cast<const std::byte*>(hello.data()), hello.size())));
  router.send(id, zmq::send_flags::sndmore);
  router.send(zmq::str_buffer("ok"));
  const std::size_t total = p.chunks * static_cast<std::size_t>(p.rounds + 2);
  double cpu0 = 0;
  Clock::time_point wall0;
  for (std::size_t served = 0; served < total; ++served) {
    if (served == 2 * p.chunks) {  // the timed rounds begin (roughly: with the first push of round 2)
      cpu0 = cpu_s();
      wall0 = Clock::now();
    }
    id = receive(router, segment.get());
    const Note push = decode_note(receive(router, segment.get()));
    if (push.chunk >= p.chunks) throw ProtocolError("bench_shm: chunk " + std::to_string(push.chunk));
    const std::size_t first = push.chunk * p.chunk_bytes, size = p.size_of(push.chunk);
    Note reply{push.round, push.chunk, 1, {}};
    {
      auto in = segment->open(push.descriptor);  // read in place
      if (in.bytes().size() != size) throw ProtocolError("bench_shm: pushed chunk of the wrong size");
      if (push.round < 2) {
        for (std::size_t i = 0; i < size; ++i) {
          if (in.bytes()[i] != pattern(first + i, 9 + push.round)) {
            reply.flag = 0;
            break;
          }
        }
      }
    }
    auto out = segment->acquire(std::chrono::seconds(30));
    p.copy_in(out.bytes().data(), weights.data() + first, size);
    reply.descriptor = out.publish(size);
    router.send(id, zmq::send_flags::sndmore);
    router.send(encode_note(reply), zmq::send_flags::none);
  }
  const double share = (cpu_s() - cpu0) / std::chrono::duration<double>(Clock::now() - wall0).count();
  // Wait for the worker's goodbye: our last replies are read before the segment goes.
  id = receive(router, segment.get());
  (void)receive(router, segment.get());
  return endpoint_pipe.write_line(std::to_string(share)) ? 0 : 1;
}

// The worker's side: returns "median_seconds wrong" for the parent.
std::string run_worker(const Plan& p, const std::string& endpoint) {
  std::vector<std::byte> gradient(p.num_bytes), model(p.num_bytes);
  ShmOptions options;
  options.slots_per_side = static_cast<std::uint32_t>(p.chunks);
  options.slot_bytes = p.chunk_bytes;
  options.name = "bench";
  const auto segment = ShmSegment::create(options);
  zmq::context_t ctx;
  zmq::socket_t dealer = make_socket(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::rcvtimeo, 1000);
  connect_socket(dealer, endpoint);
  const auto address = encode_shm_address(segment->address());
  dealer.send(zmq::buffer(address.data(), address.size()), zmq::send_flags::none);
  (void)receive(dealer, nullptr);

  int wrong = 0;
  std::vector<double> times;
  double cpu = 0;
  volatile std::uint8_t sink = 0;
  for (int r = 0; r < p.rounds + 2; ++r) {
    const auto round = static_cast<std::uint32_t>(r);
    if (r < 2) {  // warm-up rounds carry a pattern the server checks; the last round's model is checked here
      for (std::size_t i = 0; i < gradient.size(); ++i) gradient[i] = pattern(i, 9 + round);
    }
    if (r == p.rounds + 1) std::fill(model.begin(), model.end(), std::byte{0});
    std::size_t sent = 0, received = 0;
    auto take_reply = [&](const zmq::message_t& m) {
      const Note reply = decode_note(m);
      if (reply.round != round || reply.chunk >= p.chunks) throw ProtocolError("bench_shm: reply out of order");
      if (reply.flag != 1) ++wrong;
      auto in = segment->open(reply.descriptor);
      if (p.copy_out) {
        std::memcpy(model.data() + reply.chunk * p.chunk_bytes, in.bytes().data(), in.bytes().size());
      } else {
        sink = static_cast<std::uint8_t>(sink + std::to_integer<std::uint8_t>(in.bytes()[in.bytes().size() - 1]));
      }
      ++received;
    };
    const auto t0 = Clock::now();
    while (received < p.chunks) {
      if (sent < p.chunks) {
        auto slot = segment->acquire(std::chrono::seconds(30));
        const std::size_t size = p.size_of(sent);
        p.copy_in(slot.bytes().data(), gradient.data() + sent * p.chunk_bytes, size);
        dealer.send(encode_note({round, static_cast<std::uint32_t>(sent), 0, slot.publish(size)}), zmq::send_flags::none);
        ++sent;
        zmq::message_t m;  // take the replies already there, so both processes keep copying
        while (received < p.chunks && dealer.recv(m, zmq::recv_flags::dontwait)) take_reply(m);
      } else {
        take_reply(receive(dealer, segment.get()));
      }
    }
    const auto t1 = Clock::now();
    if (r >= 2) times.push_back(std::chrono::duration<double>(t1 - t0).count());
    if (r == 1) cpu = cpu_s();
  }
  double wall = 0;
  for (double t : times) wall += t;
  cpu = (cpu_s() - cpu) / wall;
  if (p.copy_out) {
    for (std::size_t c = 0; c < p.chunks; ++c) {
      for (std::size_t i = c * p.chunk_bytes; i < c * p.chunk_bytes + p.size_of(c); ++i) {
        if (model[i] != pattern(i, 5)) {
          ++wrong;
          break;
        }
      }
    }
  }
  dealer.send(zmq::str_buffer("bye"), zmq::send_flags::none);
  return std::to_string(bench::median(times)) + " " + std::to_string(wrong) + " " + std::to_string(cpu);
}

struct Trial {
  double seconds = 0, worker_cpu = 0, server_cpu = 0;
  int wrong = 0;
};

// One trial: a server and a worker process.
Trial shm_round_s(const Plan& p) {
  bench::LinePipe endpoint_pipe, result_pipe;
  const pid_t server = bench::spawn([&] { return run_server(p, endpoint_pipe); });
  endpoint_pipe.close_write();
  const std::string endpoint = endpoint_pipe.read_line();
  if (endpoint.empty()) throw Error("bench_shm: the server process did not start");
  const pid_t worker = bench::spawn([&] { return result_pipe.write_line(run_worker(p, endpoint)) ? 0 : 1; });
  result_pipe.close_write();
  const std::string line = result_pipe.read_line();
  const std::string server_line = endpoint_pipe.read_line();
  const bool ok = bench::wait_all({worker, server});
  Trial t;
  if (!ok || std::sscanf(line.c_str(), "%lf %d %lf", &t.seconds, &t.wrong, &t.worker_cpu) != 3 ||
      std::sscanf(server_line.c_str(), "%lf", &t.server_cpu) != 1) {
    throw Error("bench_shm: a round's processes failed (see their messages above)");
  }
  return t;
}

void print_table(const Args& a, const std::vector<Result>& results) {
  std::printf("# push+pull through shared memory, 1 worker x 1 server (2 processes), notifications over ZeroMQ ipc;\n"
              "# worker reads pulled chunks: %s; GB = 1e9 bytes; medians of %d trials\n",
              a.worker_reads == "copy" ? "copied into its model" : "in place", a.trials);
  std::printf("%10s %11s %11s %12s %14s %11s %7s %12s %12s\n", "size(MiB)", "chunk(MiB)", "round(ms)", "shm(GB/s)",
              "memcpy(GB/s)", "vs memcpy", "#wrong", "worker cpu", "server cpu");
  for (const Result& r : results) {
    std::printf("%10.1f %11.2f %11.3f %12.3f %14.3f %10.1f%% %7d %11.0f%% %11.0f%%\n", r.size_mib, r.chunk_mib, r.round_ms,
                r.gbps, r.memcpy_gbps, 100.0 * r.gbps / r.memcpy_gbps, r.wrong, 100.0 * r.worker_cpu,
                100.0 * r.server_cpu);
  }
  std::printf("# cpu: CPU time / wall time of that process over the timed rounds (100%% = one core all the time)\n");
}

void write_json(const Args& a, const std::vector<Result>& results) {
  std::ofstream out(a.json);
  out << "[\n";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    out << "  "
        << JsonLine().add("bench", "shm").add("worker_reads", a.worker_reads).add("size_mib", r.size_mib)
               .add("chunk_mib", r.chunk_mib).add("round_ms", r.round_ms).add("gbps_per_worker", r.gbps)
               .add("memcpy_gbps", r.memcpy_gbps).add("ratio_vs_memcpy", r.gbps / r.memcpy_gbps)
               .add("wrong", r.wrong).add("trials", a.trials).add("worker_cpu", r.worker_cpu)
               .add("server_cpu", r.server_cpu).add("stream_copies", a.stream_copies).str()
        << (i + 1 < results.size() ? ",\n" : "\n");
  }
  out << "]\n";
  if (!out) throw Error("bench_shm: cannot write " + a.json);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"push+pull through shared-memory segments between two processes, beside memcpy"};
  Args a;
  app.add_option("--sizes", a.sizes_mib, "tensor sizes in MiB")->check(CLI::Range(0.001, 4096.0));
  app.add_option("--chunk-mib", a.chunk_mib, "chunk (slot) size in MiB; a larger tensor is several chunks in flight")
      ->check(CLI::Range(0.001, 1024.0));
  app.add_option("--rounds", a.rounds, "timed rounds per trial (default: by size)");
  app.add_option("--trials", a.trials, "alternating memcpy/shm trials per size (medians reported)")
      ->check(CLI::Range(1, 50));
  app.add_option("--worker-reads", a.worker_reads, "copy: pulled chunks copied into the model; in-place: only read")
      ->check(CLI::IsMember({"copy", "in-place"}));
  app.add_flag("--stream-copies", a.stream_copies, "fill slots with shm_stream_copy (streaming stores), not memcpy");
  app.add_option("--json", a.json, "also write the results to this JSON file");
  CLI11_PARSE(app, argc, argv);
  try {
    std::vector<Result> results;
    for (double mib : a.sizes_mib) {
      Plan p;
      p.num_bytes = std::max<std::size_t>(static_cast<std::size_t>(mib * 1048576.0), 1);
      p.chunk_bytes = std::min(std::max<std::size_t>(static_cast<std::size_t>(a.chunk_mib * 1048576.0), 1), p.num_bytes);
      p.chunks = (p.num_bytes + p.chunk_bytes - 1) / p.chunk_bytes;
      p.rounds = bench::rounds_for(mib, a.rounds);
      p.copy_out = a.worker_reads == "copy";
      p.stream = a.stream_copies;
      std::vector<double> copies, rounds, worker_cpu, server_cpu;
      int wrong = 0;
      for (int t = 0; t < a.trials; ++t) {  // alternating, so drift in the machine's load hits both alike
        copies.push_back(bench::memcpy_seconds(p.num_bytes, p.rounds));
        const Trial trial = shm_round_s(p);
        rounds.push_back(trial.seconds);
        worker_cpu.push_back(trial.worker_cpu);
        server_cpu.push_back(trial.server_cpu);
        wrong += trial.wrong;
      }
      Result r;
      r.size_mib = mib;
      r.chunk_mib = static_cast<double>(p.chunk_bytes) / 1048576.0;
      r.round_ms = 1e3 * bench::median(rounds);
      r.gbps = 2.0 * static_cast<double>(p.num_bytes) / bench::median(rounds) / 1e9;
      r.memcpy_gbps = static_cast<double>(p.num_bytes) / bench::median(copies) / 1e9;
      r.wrong = wrong;
      r.worker_cpu = bench::median(worker_cpu);
      r.server_cpu = bench::median(server_cpu);
      results.push_back(r);
    }
    print_table(a, results);
    if (!a.json.empty()) write_json(a, results);
    for (const Result& r : results) {
      if (r.wrong != 0) return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_shm: %s\n", e.what());
    return 1;
  }
  return 0;
}
