#include "worker/client/kv_client.h"

#include <algorithm>
#include <cstring>

#include "common/base/bfloat16.h"
#include "common/base/errors.h"
#include "common/base/stream_copy.h"
#include "common/transport/transport.h"

namespace pstrain {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

void throw_server_error(Status status, int server, const std::string& text) {
  // kOk in an error reply breaks the protocol; kAborted means the job ends.
  if (status == Status::kOk) throw ProtocolError(text + " (an error reply with status ok)");
  if (status == Status::kAborted) throw AbortedError(text);
  throw ServerError(status, server, text + " [" + std::string(to_string(status)) + "]");
}

KVClient::KVClient(Transport& transport, const ShardMap& map, const std::vector<std::string>& server_endpoints,
                   KVClientOptions options, SchedulerClient* scheduler)
    : transport_(transport), map_(map), options_(options), scheduler_(scheduler), endpoints_(server_endpoints) {
  if (static_cast<int>(server_endpoints.size()) != map.num_servers()) {
    throw ConfigError("kv client: " + std::to_string(server_endpoints.size()) + " server endpoints for a shard map of " +
                      std::to_string(map.num_servers()) + " servers");
  }
  if (scheduler != nullptr && &scheduler->transport() != &transport) {
    throw ConfigError("kv client: the scheduler client uses another transport (wait() waits on both)");
  }
  for (std::size_t s = 0; s < server_endpoints.size(); ++s) conns_.push_back(connect_server(s, server_endpoints[s]));
  stream_pulls_ = map_.total_elems() * static_cast<std::int64_t>(sizeof(float)) > kStreamWeightsAboveBytes;
  if (options.wire_dtype != DType::kFloat32 && options.wire_dtype != DType::kBFloat16) {
    throw ConfigError("kv client: wire dtype " + std::string(to_string(options.wire_dtype)) +
                      " is not a tensor dtype (float32 or bfloat16)");
  }
  narrowed_.resize(map.chunks().size());
  all_keys_.resize(map.chunks().size());
  for (std::size_t i = 0; i < all_keys_.size(); ++i) all_keys_[i] = static_cast<std::int64_t>(i);
  for (const Chunk& c : map.chunks()) max_run_elems_ = std::max(max_run_elems_, c.num_elems);
  last_pushed_.assign(map.chunks().size(), -1);
  trace_chunks_ = options.trace != nullptr && options.trace->enabled(TraceLevel::kAll);
  if (trace_chunks_) {
    for (std::size_t s = 0; s < server_endpoints.size(); ++s) {
      trace_tracks_.push_back(options.trace->track("chunks <-> server " + std::to_string(s)));
    }
    trace_track_end_.assign(server_endpoints.size(), 0);
  }
}

std::unique_ptr<Connection> KVClient::connect_server(std::size_t server, const std::string& endpoint) {
  SocketOptions socket_options{options_.max_message_bytes, milliseconds(2000), options_.security};
  socket_options.send_timeout = options_.timeout;
  // Room for the replies of a whole pipeline to this server (a few tickets
  // of one request per chunk), so that the server's bounded send queue
  // never fills with this worker's replies however many chunks it holds.
  const auto chunks = map_.chunks_of(static_cast<int>(server)).size();
  const int room = static_cast<int>(std::min<std::size_t>(4 * chunks + 64, std::size_t{1} << 24));
  socket_options.receive_hwm = std::max(kDefaultReceiveHwm, room);
  socket_options.send_hwm = std::max(kDefaultSendHwm, room);
  EndpointOptions o;
  o.socket = socket_options;
  o.limits = DecodeLimits{options_.max_message_bytes};
  o.traffic = options_.traffic;
  if (!options_.token.empty()) o.identity = "w" + options_.token;
  o.carries_tensors = true;  // ShmTransport: pushes and pull replies through shared memory on one host
  return transport_.connect(endpoint, o);
}

Payload KVClient::payload_of(const Pending& p) {
  const Chunk& c = map_.chunk(p.key);
  if (p.src_bf16 != nullptr) {
    return Payload::bfloat16(std::span<const std::uint16_t>(p.src_bf16, static_cast<std::size_t>(c.num_elems)),
                             p.keep_alive);
  }
  if (p.src == nullptr) return {};
  const std::span<const float> values(p.src, static_cast<std::size_t>(c.num_elems));
  if (p.expect == MsgType::kPushReply && options_.wire_dtype == DType::kBFloat16) return narrow(p.key, values);
  return Payload::floats(values, p.keep_alive);
}

bool KVClient::reconnect_restarted() {
  if (scheduler_ == nullptr) return false;
  const std::vector<std::pair<int, std::string>> back = scheduler_->take_servers_back();
  for (const auto& [server, endpoint] : back) {
    if (server < 0 || static_cast<std::size_t>(server) >= conns_.size()) {
      throw ProtocolError("the scheduler announced server " + std::to_string(server) + " back; the job has " +
                          std::to_string(conns_.size()) + " servers");
    }
    const auto s = static_cast<std::size_t>(server);
    conns_[s]->abandon();  // what is queued for the failed one goes with it
    conns_[s] = connect_server(s, endpoint);
    endpoints_[s] = endpoint;
    std::vector<std::uint64_t> ids;
    for (const auto& [id, p] : pending_) {
      if (map_.chunk(p.key).server == server) ids.push_back(id);
    }
    std::sort(ids.begin(), ids.end());  // in the order first sent
    for (const std::uint64_t id : ids) {
      const Pending& p = pending_.at(id);
      conns_[s]->send(p.header, payload_of(p));
    }
    resent_ += static_cast<std::int64_t>(ids.size());
    // Probes, after the resends (the order on the connection is the order of
    // the steps): a pull for the step after the last pushed one, per chunk.
    for (const std::int64_t key : map_.chunks_of(server)) {
      const std::int64_t last = last_pushed_[static_cast<std::size_t>(key)];
      if (last < 0) continue;
      Header h;
      h.type = MsgType::kPull;
      h.role = Role::kWorker;
      h.sender = options_.worker_rank;
      h.request_id = next_request_id_++;
      h.key = key;
      h.step = last + 1;
      h.aux = static_cast<std::int64_t>(options_.wire_dtype);
      pending_[h.request_id] = Pending{0, MsgType::kPullReply, key, nullptr, 0, false, h, nullptr};
      conns_[s]->send(h);
    }
  }
  return !back.empty();
}

void KVClient::check_flat(std::size_t num_elems, const char* op) const {
  if (static_cast<std::int64_t>(num_elems) != map_.total_elems()) {
    throw ConfigError(std::string(op) + ": buffer of " + std::to_string(num_elems) + " floats, the model has " +
                      std::to_string(map_.total_elems()));
  }
}

KVClient::Ticket KVClient::push(std::span<const float> flat, std::int64_t step, double lr,
                                std::span<const std::int64_t> keys, std::shared_ptr<const void> keep_alive) {
  check_flat(flat.size(), "push");
  return start(MsgType::kPush, Flat{flat}, step, lr, keys, false, keep_alive);
}

KVClient::Ticket KVClient::push_skip(std::int64_t step, std::span<const std::int64_t> keys) {
  return start(MsgType::kPush, Flat{}, step, 0.0, keys, true);
}

KVClient::Ticket KVClient::pull(std::span<float> flat, std::int64_t step, std::span<const std::int64_t> keys) {
  check_flat(flat.size(), "pull");
  return start(MsgType::kPull, Flat{{}, flat.data()}, step, 0.0, keys);
}

KVClient::Ticket KVClient::init(std::span<const float> flat, std::span<const std::int64_t> keys) {
  check_flat(flat.size(), "init");
  return start(MsgType::kInit, Flat{flat}, 0, 0.0, keys);
}

void KVClient::check_bfloat16(std::size_t num_elems, const char* op) const {
  if (options_.wire_dtype != DType::kBFloat16) {
    throw ConfigError(std::string(op) + ": the wire dtype is " + std::string(to_string(options_.wire_dtype)) +
                      ", not bfloat16 (ps.wire_dtype)");
  }
  check_flat(num_elems, op);
}

KVClient::Ticket KVClient::push_bfloat16(std::span<const std::uint16_t> flat, std::int64_t step, double lr,
                                         std::span<const std::int64_t> keys, std::shared_ptr<const void> keep_alive) {
  check_bfloat16(flat.size(), "push_bfloat16");
  return start(MsgType::kPush, Flat{{}, nullptr, flat.data()}, step, lr, keys, false, keep_alive);
}

KVClient::Ticket KVClient::pull_bfloat16(std::span<std::uint16_t> flat, std::int64_t step,
                                         std::span<const std::int64_t> keys) {
  check_bfloat16(flat.size(), "pull_bfloat16");
  return start(MsgType::kPull, Flat{{}, nullptr, nullptr, flat.data()}, step, 0.0, keys);
}

KVClient::Ticket KVClient::start(MsgType type, const Flat& flat, std::int64_t step, double lr,
                                 std::span<const std::int64_t> keys, bool skip,
                                 const std::shared_ptr<const void>& keep_alive) {
  const Ticket ticket = next_ticket_++;
  TicketState& state = tickets_[ticket];
  if (keys.empty()) keys = all_keys_;
  for (const std::int64_t key : keys) {
    if (key < 0 || key >= static_cast<std::int64_t>(map_.chunks().size())) {
      throw ConfigError(std::string(to_string(type)) + ": chunk id " + std::to_string(key) + " outside [0, " +
                        std::to_string(map_.chunks().size()) + ")");
    }
    // Pushed: this worker has read the chunk's weights for the last time this step. Its held
    // reply goes before the push does, so the server finds it handed back and updates in place.
    if (type == MsgType::kPush) pages_.release(key);
  }
  for (std::size_t at = 0; at < keys.size();) {
    const std::size_t n = run_length(type, keys, at, skip);
    send_run(type, flat, step, lr, keys.subspan(at, n), skip, keep_alive, ticket);
    state.outstanding += n;
    at += n;
  }
  return ticket;
}

std::size_t KVClient::run_length(MsgType type, std::span<const std::int64_t> keys, std::size_t at, bool skip) const {
  const bool push = type == MsgType::kPush;
  if (type == MsgType::kInit || (push && !skip && options_.wire_dtype != DType::kFloat32)) return 1;
  const Chunk* last = &map_.chunk(keys[at]);
  std::int64_t elems = last->num_elems;
  std::size_t n = 1;
  while (at + n < keys.size() && n < static_cast<std::size_t>(kMaxChunksPerMessage)) {
    const std::int64_t key = keys[at + n];
    if (key != keys[at] + static_cast<std::int64_t>(n)) break;
    const Chunk& c = map_.chunk(key);
    if (c.server != last->server || c.offset != last->offset + last->num_elems) break;
    if (push && !skip && elems + c.num_elems > max_run_elems_) break;
    elems += c.num_elems;
    last = &c;
    ++n;
  }
  return n;
}

void KVClient::send_run(MsgType type, const Flat& flat, std::int64_t step, double lr,
                        std::span<const std::int64_t> keys, bool skip, const std::shared_ptr<const void>& keep_alive,
                        Ticket ticket) {
  const Chunk& first = map_.chunk(keys.front());
  Header run;
  run.type = keys.size() == 1 ? type : type == MsgType::kPush ? MsgType::kPushChunks : MsgType::kPullChunks;
  run.role = Role::kWorker;
  run.sender = options_.worker_rank;
  run.request_id = next_request_id_;
  run.key = keys.front();
  run.version = keys.size() == 1 ? 0 : static_cast<std::int64_t>(keys.size());
  run.step = step;
  run.lr = lr;
  if (skip) run.aux = kPushSkip;
  if (type == MsgType::kPull) run.aux = static_cast<std::int64_t>(options_.wire_dtype);
  const MsgType expect = type == MsgType::kPush   ? MsgType::kPushReply
                         : type == MsgType::kPull ? MsgType::kPullReply
                                                  : MsgType::kInitReply;
  const bool carries = type != MsgType::kPull && !skip;
  std::int64_t elems = 0;
  const Pending* single = nullptr;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const Chunk& c = map_.chunk(keys[i]);
    if (type == MsgType::kPush) {
      std::int64_t& last = last_pushed_[static_cast<std::size_t>(keys[i])];
      last = std::max(last, step);
    }
    Header h = keys.size() == 1 ? run : chunk_request(run, static_cast<std::int64_t>(i), 0);
    h.num_elems = 0;  // the single request's payload fields are set when it is encoded (payload_of)
    const auto offset = static_cast<std::size_t>(c.offset);
    single = &(pending_[next_request_id_++] =
                   Pending{ticket, expect, keys[i], flat.dest == nullptr ? nullptr : flat.dest + offset,
                           trace_chunks_ ? options_.trace->now_us() : 0, skip, h,
                           carries && !flat.src.empty() ? flat.src.data() + offset : nullptr,
                           type == MsgType::kPull && step == kPullRejoinProbe, skip ? nullptr : keep_alive,
                           carries && flat.src_bf16 != nullptr ? flat.src_bf16 + offset : nullptr,
                           flat.dest_bf16 == nullptr ? nullptr : flat.dest_bf16 + offset});
    elems += c.num_elems;
  }
  const auto server = static_cast<std::size_t>(first.server);
  if (keys.size() == 1) return send_to(server, single->header, payload_of(*single));
  Payload payload;
  if (carries) payload = Payload::floats(flat.src.subspan(static_cast<std::size_t>(first.offset), static_cast<std::size_t>(elems)), keep_alive);
  send_to(server, run, std::move(payload));
}

void KVClient::send_to(std::size_t server, const Header& h, Payload payload) {
  try {
    conns_[server]->send(h, std::move(payload));
  } catch (const TransportError&) {
    // A send that cannot go out (the server's queue stayed full, or it is
    // gone) while the job is ending: the job's end is the cause, not the socket.
    if (scheduler_ != nullptr && scheduler_->drain_incoming()) {  // an abort throws AbortedError itself
      throw AbortedError("worker " + std::to_string(options_.worker_rank) +
                         ": the scheduler shut the job down while this worker sent a request to server " +
                         std::to_string(server));
    }
    throw;
  }
}

Payload KVClient::narrow(std::int64_t key, std::span<const float> values) {
  std::shared_ptr<std::vector<std::uint16_t>>& buffer = narrowed_[static_cast<std::size_t>(key)];
  if (!buffer || buffer.use_count() > 1) buffer = std::make_shared<std::vector<std::uint16_t>>(values.size());
  buffer->resize(values.size());
  to_bfloat16(values, *buffer);
  return Payload::bfloat16(std::span<const std::uint16_t>(*buffer), buffer);
}

TicketResult KVClient::wait(Ticket ticket) {
  auto it = tickets_.find(ticket);
  if (it == tickets_.end()) throw ConfigError("wait: unknown ticket " + std::to_string(ticket));
  auto deadline = Clock::now() + options_.timeout;
  std::vector<Endpoint*> endpoints;
  auto poll_items = [&] {
    endpoints.clear();
    for (auto& c : conns_) endpoints.push_back(c.get());
    if (scheduler_ != nullptr) endpoints.push_back(&scheduler_->connection());
  };
  poll_items();
  while (tickets_[ticket].outstanding > 0) {
    if (reconnect_restarted()) poll_items();
    // A server the scheduler says is coming back is waited for, not timed out
    // (the scheduler bounds the restart and aborts the job if it never comes).
    if (scheduler_ != nullptr && scheduler_->server_restarting()) deadline = Clock::now() + options_.timeout;
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      throw TimeoutError("worker " + std::to_string(options_.worker_rank) + ": " +
                         std::to_string(tickets_[ticket].outstanding) + " replies from the servers still missing after " +
                         std::to_string(options_.timeout.count()) + " ms");
    }
    const std::vector<bool> ready = pstrain::wait_any(endpoints, std::min(left, milliseconds(500)));
    for (std::size_t s = 0; s < conns_.size(); ++s) {
      if (ready[s]) receive_from(s);
    }
    if (scheduler_ != nullptr && ready.back() && scheduler_->handle_incoming()) {
      // The job ended while this worker waited for the servers: waiting on is pointless.
      throw AbortedError("worker " + std::to_string(options_.worker_rank) +
                         ": the scheduler shut the job down while this worker waited for " +
                         std::to_string(tickets_[ticket].outstanding) + " replies from the servers");
    }
    // After reading what was queued: silent means silent since the last message.
    if (scheduler_ != nullptr && !ready.back()) scheduler_->check_scheduler_alive();
  }
  TicketState state = std::move(tickets_[ticket]);
  tickets_.erase(ticket);
  if (!state.error.empty()) throw_server_error(state.error_status, state.error_server, state.error);
  if (state.replies > 0) state.result.mean_staleness = static_cast<double>(state.staleness_sum) / static_cast<double>(state.replies);
  return state.result;
}

void KVClient::receive_from(std::size_t server) {
  // Drain everything that is ready on this socket. A server the scheduler
  // declared failed (restarting) may have been stopped and woken: what it
  // sends now is not taken (its replacement restores the shard from the
  // checkpoint, and every request still pending is resent to it).
  const bool replaced = scheduler_ != nullptr && scheduler_->server_restarting(static_cast<int>(server));
  while (true) {
    auto env = conns_[server]->receive(milliseconds(0));
    if (!env) return;
    if (!replaced) complete(env->message, server);
  }
}

void KVClient::complete(Message& msg, std::size_t server) {
  const Header& h = msg.header;
  auto it = pending_.find(h.request_id);
  if (it == pending_.end()) {
    if (h.type == MsgType::kError) {
      throw_server_error(h.status, static_cast<int>(server),
                         "server " + std::to_string(server) + " (" + endpoints_[server] + ") reported: " + msg.text_payload());
    }
    throw ProtocolError("server " + std::to_string(server) + ": reply to unknown request " + std::to_string(h.request_id));
  }
  const Pending p = it->second;
  pending_.erase(it);
  if (p.ticket == 0) return;  // a probe after a server restart: its answer is not needed
  if (trace_chunks_) trace_reply(p, server);
  TicketState& state = tickets_[p.ticket];
  --state.outstanding;
  if (h.type == MsgType::kError) {
    if (state.error.empty()) {
      state.error = "server " + std::to_string(server) + ": " + msg.text_payload();
      state.error_status = h.status;
      state.error_server = static_cast<int>(server);
    }
    return;
  }
  if (h.type != p.expect || h.key != p.key) {
    throw ProtocolError("server " + std::to_string(server) + ": expected " + std::string(to_string(p.expect)) +
                        " for chunk " + std::to_string(p.key) + ", got " + std::string(to_string(h.type)) +
                        " for chunk " + std::to_string(h.key));
  }
  if (h.type == MsgType::kPullReply) {
    const Chunk& c = map_.chunk(p.key);
    if (h.num_elems != c.num_elems) {
      throw ProtocolError("server " + std::to_string(server) + ": pull of chunk " + std::to_string(p.key) + " returned " +
                          std::to_string(h.num_elems) + " elements, expected " + std::to_string(c.num_elems));
    }
    if (h.dtype != options_.wire_dtype) {
      throw ProtocolError("server " + std::to_string(server) + ": pull of chunk " + std::to_string(p.key) +
                          " answered in " + std::string(to_string(h.dtype)) + ", asked for " +
                          std::string(to_string(options_.wire_dtype)));
    }
    write_pull_reply(msg, p, server);
    if (state.first_version || h.version < state.result.min_version) state.result.min_version = h.version;
    state.result.max_parked_us = std::max(state.result.max_parked_us, h.aux);
    state.first_version = false;
    if (p.probe) state.result.next_steps.emplace_back(p.key, h.step);
    else if (pull_arrival_) pull_arrival_(p.key);
  } else if (h.type == MsgType::kPushReply && !p.skip) {
    state.result.max_staleness = std::max(state.result.max_staleness, h.aux);
    state.staleness_sum += h.aux;
    ++state.replies;
  }
}

void KVClient::write_pull_reply(Message& msg, const Pending& p, std::size_t server) {
  const auto n = static_cast<std::size_t>(map_.chunk(p.key).num_elems);
  if (p.pull_dest_bf16 == nullptr) {
    // The server's pages mapped into place and the reply held (or, when they
    // cannot be, private memory back under the range before the copy).
    if (pages_.covers(p.key, p.pull_dest) && pages_.take(p.key, msg.payload)) return;
    // Straight into the caller's buffer (bfloat16: widened on the way).
    msg.copy_floats_to(std::span<float>(p.pull_dest, n), stream_pulls_);
    return;
  }
  // bfloat16 as received (the dtype was checked): the copy engine widens it.
  if (msg.payload.size() != n * sizeof(std::uint16_t)) {
    throw ProtocolError("server " + std::to_string(server) + ": pull of chunk " + std::to_string(p.key) + " carried " +
                        std::to_string(msg.payload.size()) + " bytes for " + std::to_string(n) + " bfloat16 elements");
  }
  if (n > 0) std::memcpy(p.pull_dest_bf16, msg.payload.data(), n * sizeof(std::uint16_t));
}

// A chunk's span on its server's track ends when the reply arrives. Requests
// to one server are answered in order, so their send-to-reply intervals
// overlap: the span starts at the send or at the end of the previous span on
// that track, whichever is later (the time this reply alone accounts for);
// latency_us holds the whole send-to-reply time.
void KVClient::trace_reply(const Pending& p, std::size_t server) {
  const std::int64_t end = options_.trace->now_us();
  const std::int64_t begin = std::max(p.sent_us, trace_track_end_[server]);
  trace_track_end_[server] = std::max(end, begin);
  // Tensor bytes on the wire: init is always float32, pushes and pulls go in the wire dtype.
  const auto element_bytes =
      static_cast<std::int64_t>(p.expect == MsgType::kInitReply ? sizeof(float) : dtype_bytes(options_.wire_dtype));
  const char* name = p.skip ? "skip push"
                     : p.expect == MsgType::kPushReply ? "push"
                     : p.expect == MsgType::kPullReply ? "pull" : "init";
  options_.trace->record(trace_tracks_[server], name, "chunk", begin, end - begin,
                         {{"chunk", p.key},
                          {"server", static_cast<std::int64_t>(server)},
                          {"bytes", p.skip ? 0 : map_.chunk(p.key).num_elems * element_bytes},
                          {"latency_us", end - p.sent_us}});
}

}  // namespace pstrain
