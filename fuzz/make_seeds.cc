// Writes the seed corpus (fuzz/corpus/<target>/) from real encoded messages:
// tools/fuzz.sh --seeds. Built with the targets, not part of the project.
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>

#include "common/wire/protocol.h"
#include "common/wire/wire_archive.h"

namespace fs = std::filesystem;
using namespace pstrain;

namespace {

void write(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

std::string frame_prefix(std::size_t n) {  // fuzz/message.cc's 2-byte length
  return std::string{static_cast<char>(n & 0xff), static_cast<char>(n >> 8)};
}

// fuzz/message.cc's input for header `h` and its payload frame `body` (none when empty).
std::string message_input(const Header& h, const std::string& body) {
  const Buffer head = encode_header(h);
  const std::string head_bytes(static_cast<const char*>(head.data()), head.size());
  return body.empty() ? std::string(1, '\0') + head_bytes
                      : std::string(1, '\1') + frame_prefix(head.size()) + head_bytes + body;
}

// The messages of a grow (kRegisterJoin, kWorkerJoining), as the nodes send them:
// a --join registration asking for slot 2, the scheduler telling a server that
// worker 2 joins from step 12 in change 1, and that server's acknowledgement.
void write_join_messages(const fs::path& dir, const RegisterRequest& worker) {
  RegisterRequest joiner = worker;
  joiner.requested_rank = 2;
  const std::string request = wire_encode(joiner);
  Header reg;
  reg.type = MsgType::kRegister;
  reg.role = Role::kWorker;
  reg.sender = -1;
  reg.aux = kRegisterJoin;
  reg.dtype = DType::kBytes;
  reg.num_elems = static_cast<std::int64_t>(request.size());
  write(dir, "register-join", message_input(reg, request));
  Header joining;
  joining.type = MsgType::kWorkerJoining;
  joining.role = Role::kScheduler;
  joining.sender = 0;
  joining.key = 2;
  joining.step = 12;
  joining.aux = 1;
  joining.dtype = DType::kBytes;
  joining.num_elems = 32;
  write(dir, "worker-joining", message_input(joining, "0123456789abcdef0123456789abcdef"));
  const std::string ack = wire_encode(StoreEntry{std::string(kJoinAckPrefix) + "1/0/2", "ok"});
  Header set;
  set.type = MsgType::kStoreSet;
  set.role = Role::kServer;
  set.sender = 0;
  set.dtype = DType::kBytes;
  set.num_elems = static_cast<std::int64_t>(ack.size());
  write(dir, "store-set-join-ack", message_input(set, ack));
}

// fuzz/cluster_sequence.cc's input: the failure policy (0 abort, 1 continue,
// 2 restart), then ops: byte peer * 8 + kind, then its argument bytes.
struct Ops {
  explicit Ops(int policy = 0) : bytes(1, static_cast<char>(policy)) {}
  std::string bytes;
  Ops& op(int peer, int kind, std::initializer_list<int> args) {
    bytes += static_cast<char>(peer * 8 + kind);
    for (int a : args) bytes += static_cast<char>(a);
    return *this;
  }
  Ops& reg(int peer, int rank, int flags = 0) { return op(peer, 0, {flags, rank + 1}); }
  // type: 0 heartbeat 1 barrier 2 done 3 abort 4 store set 5 store get; own rank
  Ops& sched(int peer, int type, int key = 0, int size = 3) { return op(peer, 1, {128 | type, 0, key, size}); }
  // type: 0 init 1 push 2 pull 3 skip 4 pull bf16; who 128 = own rank
  Ops& server(int peer, int type, int chunk, int step, int who = 128, int payload = 100) {
    return op(peer, 2, {type, who, chunk + 1, step, payload, 0});
  }
  Ops& drain() { return op(0, 5, {}); }
  Ops& honest_barrier() { return op(1, 5, {}); }  // worker 0 enters its next barrier
};

void write_cluster_seeds(const fs::path& dir) {
  constexpr int kChunks = 3;  // the harness's layout (32 floats) in 16-float chunks
  // A normal worker 1: register, init, then two steps of pull and push, barrier, done.
  Ops job;
  job.reg(1, 1).drain().drain().drain();
  for (int c = 0; c < kChunks; ++c) job.server(1, 0, c, 0);
  for (int step = 0; step < 2; ++step) {
    for (int c = 0; c < kChunks; ++c) job.server(1, 2, c, step).server(1, 1, c, step);
    job.drain().op(1, 7, {32});
  }
  job.sched(1, 1, 0).sched(1, 4, 1).sched(1, 5, 1).drain().sched(1, 2);
  write(dir, "job", job.bytes);
  // Forgeries: worker 1 pushes, pulls and finishes in worker 0's name; a
  // far-future pull; a stranger's register as rank 0; a hit-and-run store set.
  Ops forged;
  forged.reg(1, -1).reg(2, 0).drain().drain().drain();
  forged.server(1, 0, 0, 0).server(1, 1, 0, 0, 1).server(1, 2, 1, 255).server(2, 1, 1, 255, 1);
  forged.op(1, 1, {2, 1, 0, 0}).op(1, 1, {3, 1, 0, 0}).op(1, 7, {1});
  forged.op(2, 6, {}).sched(2, 4, 0, 128).drain();
  write(dir, "forged", forged.bytes);
  // A peer registers as a server and leaves; another registers and leaves
  // before the rendezvous; raw bytes to both nodes.
  Ops leave;
  leave.reg(1, 1).op(1, 4, {}).op(2, 3, {1, 4, 'P', 'S', 'T', 'R'}).op(2, 3, {2, 3, 1, 2, 3}).drain();
  write(dir, "leave", leave.bytes);
  Ops layout;
  layout.reg(1, -1, 4).drain().drain();
  write(dir, "layout", layout.bytes);
  // Worker 1 says done while worker 0 waits at a barrier, under each policy.
  for (int policy = 0; policy < 3; ++policy) {
    Ops early(policy);
    early.reg(1, 1).drain().drain().drain().honest_barrier().drain().sched(1, 2).drain().drain();
    write(dir, "early_done_" + std::to_string(policy), early.bytes);
  }
  // Under "restart": worker 1 aborts (dropped) while worker 0 waits at a
  // barrier, and another peer takes rank 1 back (register flag 64: --rejoin).
  Ops rejoin(2);
  rejoin.reg(1, 1).drain().drain().drain().honest_barrier().sched(1, 3).drain().drain();
  rejoin.reg(2, 1, 64).drain().drain().drain().sched(2, 1, 1).drain();
  write(dir, "drop_rejoin", rejoin.bytes);
  // A grow, under "abort" and "continue": peer 2 registers with --join
  // (register flag 128) for the vacant slot 2; worker 0 answers the change
  // itself, worker 1 answers "0 1 1" (store set, size bit 6); the server
  // admits the joiner and acknowledges; then barriers and worker 1's done.
  for (int policy = 0; policy < 2; ++policy) {
    Ops join(policy);
    join.reg(1, 1).drain().drain().drain().reg(2, 2, 128).drain().drain();
    join.sched(1, 4, 0, 64).drain().drain().drain().honest_barrier().sched(1, 1, 0).sched(2, 1, 0).drain();
    join.sched(1, 2).drain();
    write(dir, "join_" + std::to_string(policy), join.bytes);
  }
}

// fuzz/shm_layer.cc's ops: a push through a real slot (op 1, nothing
// forged), a stale descriptor (op 0), an ordinary message (op 4); and a
// forged offset (op 1, field 3).
void write_shm_seeds(const fs::path& dir) {
  pstrain::Header h;
  h.type = pstrain::MsgType::kPush;
  h.role = pstrain::Role::kWorker;
  h.dtype = pstrain::DType::kFloat32;
  h.num_elems = 4;
  const pstrain::Buffer head = pstrain::encode_header(h);
  const std::string head_bytes(static_cast<const char*>(head.data()), head.size());
  const auto push = [&](char field) {
    std::string op{'\1', '\1'};
    op += std::string(16, '\x3f');
    op += std::string{'\x10', '\0'};
    op += std::string(8, '\x7f');
    op += field;
    return op + head_bytes;
  };
  write(dir, "push", std::string{'\2'} + push('\5') + '\0' + std::string(8, '\x10') + std::string{'\4', '\4'} +
                         "abcd" + '\1');
  write(dir, "forged", std::string{'\0'} + push('\3'));
}

}  // namespace

int main(int argc, char** argv) {
  const fs::path root = argc > 1 ? argv[1] : "fuzz/corpus";
  ParamLayout layout;
  layout.add("conv.w", {8, 1, 3, 3});
  layout.add("conv.b", {8});
  layout.add("fc.w", {10, 32});
  RegisterRequest req;
  req.role = Role::kWorker;
  req.host = "node3";
  req.pid = 1234;
  req.job_fingerprint = "mode=sync partition_bytes=1024 servers=2 workers=2";
  req.layout = layout;
  write(root / "register_request", "worker", std::string("\x01\x40", 2) + wire_encode(req));
  write_join_messages(root / "message", req);
  req.requested_rank = 2;  // a --join asking for slot 2
  write(root / "register_request", "joiner", std::string("\x01\x40", 2) + wire_encode(req));
  req.requested_rank = -1;
  req.role = Role::kServer;
  req.layout = ParamLayout();
  req.endpoint = "tcp://10.0.0.2:9100";
  write(root / "register_request", "server", std::string("\x01\x40", 2) + wire_encode(req));
  RegisterReply reply;
  reply.rank = 1;
  reply.num_servers = 2;
  reply.num_workers = 2;
  reply.server_endpoints = {"tcp://10.0.0.1:9100", "tcp://10.0.0.2:9101"};
  reply.layout = layout;
  reply.token = "0123456789abcdef0123456789abcdef";
  reply.worker_tokens = {reply.token, "fedcba9876543210fedcba9876543210"};
  write(root / "register_reply", "reply", std::string("\x40", 1) + wire_encode(reply));
  write(root / "store_entry", "gloo", wire_encode(StoreEntry{"gloo/rank0", std::string(64, 'a')}));
  write(root / "store_entry", "empty", wire_encode(StoreEntry{"k", ""}));
  for (MsgType type : {MsgType::kPush, MsgType::kPull, MsgType::kRegister, MsgType::kHeartbeat, MsgType::kStoreSet,
                       MsgType::kPushChunks, MsgType::kPullChunks}) {
    Header h;
    h.type = type;
    h.role = Role::kWorker;
    h.sender = 1;
    h.key = 3;
    h.step = 7;
    std::string body;
    if (type == MsgType::kPushChunks) h.version = 2;  // a run of chunks 3 and 4
    if (type == MsgType::kPullChunks) h.version = 3;
    if (type == MsgType::kPush || type == MsgType::kPushChunks) {
      h.dtype = DType::kFloat32;
      h.num_elems = 4;
      body = std::string(16, '\0');
    } else if (type == MsgType::kStoreSet) {
      body = wire_encode(StoreEntry{"nccl/id", "x"});
      h.dtype = DType::kBytes;
      h.num_elems = static_cast<std::int64_t>(body.size());
    }
    write(root / "message", std::string(to_string(type)), message_input(h, body));
  }
  write_cluster_seeds(root / "cluster_sequence");
  write_shm_seeds(root / "shm_layer");
  write(root / "config", "sync", "workload.epochs=2\nmode = \"sync\"\n[cluster]\nworkers = 2\n[security]\nmode = \"curve\"\n");
  write(root / "config", "bad", "security.mode=tls\n[ps]\npartition_bytes = 3\n");
  return 0;
}
