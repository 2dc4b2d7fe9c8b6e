// Writes the seed corpus (fuzz/corpus/<target>/) from real encoded messages:
// tools/fuzz.sh --seeds. Built with the targets, not part of the project.
#include <filesystem>
#include <fstream>
#include <string>

#include "common/protocol.h"
#include "common/wire_archive.h"

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
  for (MsgType type : {MsgType::kPush, MsgType::kPull, MsgType::kRegister, MsgType::kHeartbeat, MsgType::kStoreSet}) {
    Header h;
    h.type = type;
    h.role = Role::kWorker;
    h.sender = 1;
    h.key = 3;
    h.step = 7;
    std::string body;
    if (type == MsgType::kPush) {
      h.dtype = DType::kFloat32;
      h.num_elems = 4;
      body = std::string(16, '\0');
    } else if (type == MsgType::kStoreSet) {
      body = wire_encode(StoreEntry{"nccl/id", "x"});
      h.dtype = DType::kBytes;
      h.num_elems = static_cast<std::int64_t>(body.size());
    }
    const zmq::message_t head = encode_header(h);
    const std::string head_bytes(static_cast<const char*>(head.data()), head.size());
    const std::string input = body.empty() ? std::string(1, '\0') + head_bytes
                                           : std::string(1, '\1') + frame_prefix(head.size()) + head_bytes + body;
    write(root / "message", std::string(to_string(type)), input);
  }
  write(root / "config", "sync", "workload.epochs=2\nmode = \"sync\"\n[cluster]\nworkers = 2\n[security]\nmode = \"curve\"\n");
  write(root / "config", "bad", "security.mode=tls\n[ps]\npartition_bytes = 3\n");
  return 0;
}
