#include "server/server.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "common/base/endpoint_address.h"
#include "common/base/bfloat16.h"
#include "common/base/errors.h"
#include "common/node/retry.h"
#include "common/transport/transport.h"

namespace pstrain {

using std::chrono::milliseconds;

std::string advertised_endpoint(const std::string& bound, const std::string& host) {
  const std::optional<EndpointAddress> address = parse_endpoint(bound);
  if (host.empty() || !address || !address->is_tcp()) return bound;
  return tcp_endpoint(host, address->port);
}

// The ROUTER's send queue per connection holds kServerSendHwm replies: a
// worker's whole pipeline (a request per chunk this server holds, a push and
// a pull ticket in flight) even when a loaded machine's I/O thread falls
// behind, so a legitimate reply is never dropped (the KV client makes the
// same room to receive, kv_client.cc). A peer that is not one of the job's
// workers gets only error replies of a few hundred bytes, so its share is
// bounded at about kServerSendHwm x 300 bytes, and further by the node's
// memory budget (set once registered: server_memory_limits).
// No request a worker sends a server has a frame larger than a chunk
// (ps.partition_bytes): the socket takes none larger (ZMQ_MAXMSGSIZE, plus
// make_socket's 4 KiB), so ZeroMQ disconnects a peer announcing a bigger
// frame before reading it, and a flood of large frames costs no reads.
static EndpointOptions server_endpoint_options(const ServerOptions& options) {
  EndpointOptions o;
  const std::int64_t largest_frame = std::min(options.cluster.max_message_bytes, options.partition_bytes);
  o.socket = SocketOptions{largest_frame, milliseconds(2000), options.security};
  o.socket.send_hwm = kServerSendHwm;
  o.limits = DecodeLimits{options.cluster.max_message_bytes};
  o.traffic = options.traffic;
  return o;
}

Server::Server(Transport& transport, ServerOptions options, Logger& log)
    : Server(nullptr, &transport, std::move(options), log) {}

Server::Server(std::unique_ptr<Transport> transport, ServerOptions options, Logger& log)
    : Server(std::move(transport), nullptr, std::move(options), log) {}

Server::Server(std::unique_ptr<Transport> owned, Transport* transport, ServerOptions options, Logger& log)
    : owned_transport_(std::move(owned)), transport_(transport != nullptr ? *transport : *owned_transport_), options_(std::move(options)), log_(log),
      zap_(transport_.authenticate(options_.security, log)),
      router_(transport_.listen(options_.bind_endpoint, server_endpoint_options(options_))),
      admission_(options_.security), warnings_(log) {
  endpoint_ = advertised_endpoint(router_->address(), options_.advertise_host);
}

const StoreStats& Server::stats() const { return store_ ? store_->stats() : no_stats_; }

void Server::make_store(const RegisterReply& info) {
  map_ = ShardMap(info.layout, info.num_servers, options_.partition_bytes);
  const int threads = resolve_apply_threads(options_.apply_threads, options_.cluster, rank_);
  apply_pool_ = std::make_unique<ApplyPool>(threads, static_cast<std::size_t>(options_.apply_split_bytes) / sizeof(float));
  log_.info("apply threads: " + std::to_string(threads) + " (" +
            apply_threads_reason(options_.apply_threads, options_.cluster, rank_) + ")");
  StoreOptions store_options;
  store_options.consistency = ConsistencyOptions{options_.mode, options_.staleness_bound};
  store_options.optimizer = options_.optimizer;
  store_options.max_lr = options_.max_lr;
  // Weights in the transport's send memory: with shm, arenas the co-located
  // workers map read-only, from which they read pull replies in place.
  store_options.allocate = [&transport = transport_](std::size_t count) { return transport.allocate_send_floats(count); };
  store_options.ranges = apply_pool_.get();
  store_ = std::make_unique<ShardStore>(map_, rank_, worker_slots(info), store_options);
  vacate_slots(info);
}

void Server::run() {
  SchedulerClient scheduler(transport_, options_.scheduler_endpoint, Role::kServer, options_.cluster, options_.traffic,
                            options_.security);
  try {
    RegisterRequest req;
    req.requested_rank = options_.requested_rank;
    req.endpoint = endpoint_;
    req.host = this_host();
    req.pid = static_cast<std::int64_t>(getpid());
    req.job_fingerprint = options_.job_fingerprint;
    const RegisterReply info = register_with(scheduler, req);
    rank_ = info.rank;
    log_.set_name("server " + std::to_string(rank_));
    if (options_.on_registered) options_.on_registered(rank_);
    make_store(info);
    sync_queue_.reserve(kMaxSyncBatch);
    admission_.bind(info.worker_tokens);
    limit_memory(info.num_workers);
    store_->set_trace(options_.trace);
    start_checkpoints();
    if (options_.trace != nullptr) options_.trace->set_process("server", rank_);
    log_.info("listening on " + endpoint_ + "; holds " + std::to_string(map_.chunks_of(rank_).size()) + " chunks (" +
              std::to_string(map_.bytes_of(rank_)) + " bytes); " + map_.summary());

    Endpoint* const endpoints[] = {router_.get(), &scheduler.connection()};
    while (!scheduler.shutdown_received()) {
      // Requests already read (sync_queue_) are served without waiting.
      const std::vector<bool> ready = wait_any(endpoints, milliseconds(sync_queue_.empty() ? 500 : 0));
      if (ready[0] || !sync_queue_.empty()) handle_request();
      if (ready[1]) {
        scheduler.handle_incoming();
      } else {
        scheduler.check_scheduler_alive();  // nothing queued: silent since its last message
      }
      for (const int worker : scheduler.take_dropped()) on_worker_dropped(worker);
      for (const int worker : scheduler.take_retired()) on_worker_dropped(worker, true);
      for (const SchedulerClient::Rejoined& r : scheduler.take_rejoined()) on_worker_rejoined(r.rank, r.token);
      for (const SchedulerClient::Joining& j : scheduler.take_joining()) on_worker_joining(scheduler, j);
      for (const ShardStore::Refusal& r : store_->take_refusals()) {  // the pusher named, not its victims
        warnings_.warn("worker " + std::to_string(r.worker), "refused: " + r.why);
      }
      expire_parked();
      router_->give_back_memory();  // after a flood of unsent replies has drained
    }
    const StoreStats& s = store_->stats();
    if (s.rejoined_from_step >= 0) {
      log_.info("rejoined from checkpoint step " + std::to_string(s.rejoined_from_step) + ": " +
                std::to_string(s.lost_updates) + " chunk updates lost over " +
                std::to_string(s.lost_updates_by_chunk.size()) + " chunks, " + std::to_string(s.lost_pushes) +
                " pushes lost");
    }
    log_.info("shutdown: " + std::to_string(s.updates_applied) + " chunk updates, " + std::to_string(s.pushes_accepted) +
              " pushes accepted, " + std::to_string(s.pushes_rejected) + " rejected, " +
              std::to_string(bad_requests_) + " malformed requests, " + std::to_string(expired_pulls_) +
              " expired pulls, " + std::to_string(unreachable_replies_) + " replies to peers that had gone or " +
              "did not read (" + std::to_string(router_->shed_replies()) + " of them over the memory budget)");
    for (const auto& [worker, count] : s.refused_by_worker) {
      log_.warn("worker " + std::to_string(worker) + ": " + std::to_string(count) +
                " pushes or steps refused for their values (learning rate, NaN or Inf)");
    }
  } catch (const AbortedError&) {
    throw;
  } catch (const std::exception& e) {
    scheduler.report_failure("server " + std::to_string(rank_) + ": " + e.what());
    throw;
  }
}

RegisterReply Server::register_with(SchedulerClient& scheduler, const RegisterRequest& request) {
  // A rejoin can reach the scheduler before it has noticed the failure (a
  // respawn is quicker than the heartbeat timeout): it refuses for now
  // (retryable), saying the rank is alive. Asked again until it has noticed,
  // at most for one heartbeat timeout and a few intervals; a rank that really
  // is alive is still refused then.
  const auto give_up = std::chrono::steady_clock::now() +
                       milliseconds(options_.cluster.heartbeat_timeout_ms + 4 * options_.cluster.heartbeat_interval_ms);
  RetryOptions retry;
  retry.on_retry = [this](const std::exception& e, int earlier) {
    if (earlier > 0) return;
    log_.info(std::string("rejoin: ") + e.what() + "; asking again until the scheduler has noticed the failure");
  };
  const Retryable retryable = [this](const std::exception& e) { return options_.rejoin && retryable_refusal(e); };
  return *retry_until(give_up, "", retryable, [&] { return std::optional(scheduler.register_node(request)); }, retry);
}

// The failure policy dropped `worker` (on_worker_failure "continue"): the
// consistency policy stops waiting for it, which is a step boundary of every
// chunk (its drop may complete a step, or a checkpoint's step, that no push
// will complete), and any parked pull may be answerable now (ssp: a slowest
// clock left). A worker that `retired` at a membership change leaves its slot
// vacant first: the updates without it are whole, not partial.
void Server::on_worker_dropped(int worker, bool retired) {
  if (retired) store_->vacate(worker);
  const std::vector<std::int64_t> advanced = store_->drop_worker(worker);
  for (const std::int64_t key : store_->keys()) checkpointer_->at_step_boundary(*store_, key);
  log_.info("worker " + std::to_string(worker) + (retired ? " retired" : " was dropped from the job") +
            ": no longer waited for (" + std::to_string(advanced.size()) + " chunks completed their step without it)");
  std::vector<std::int64_t> waiting;
  for (const auto& entry : parked_) waiting.push_back(entry.first);
  for (const std::int64_t key : waiting) answer_parked(key);
}

// A new process took back worker `worker`'s rank (on_worker_failure
// "restart"): its connection is the one named by its new token (the old
// one's requests are refused from now on) and the consistency policy
// re-admits it at the step the job is at (server/consistency.h).
void Server::on_worker_rejoined(int worker, const std::string& token) {
  admission_.rebind(worker, token);
  router_->set_members(admission_.connections());
  const std::vector<std::int64_t> start = store_->rejoin_worker(worker);
  std::int64_t lowest = 0, highest = 0;
  if (!start.empty()) {
    lowest = *std::min_element(start.begin(), start.end());
    highest = *std::max_element(start.begin(), start.end());
  }
  log_.info("worker " + std::to_string(worker) + " rejoined the job: re-admitted at step " + std::to_string(lowest) +
            (highest != lowest ? " to " + std::to_string(highest) : std::string()) + " of its " +
            std::to_string(start.size()) + " chunks here");
}

// A reply the listener refused (its peer has gone, or its queue or the
// memory budget is full): counted, the first one logged.
void Server::note_unsent(const TransportError& e) {
  if (unreachable_replies_++ == 0) log_.info(std::string("a reply was not sent: ") + e.what());
}

// The memory budget for unsent replies (server/admission.h), once the shard
// and the workers' connections are known.
void Server::limit_memory(int num_workers) {
  const std::int64_t shard = map_.bytes_of(rank_);
  const MemoryLimits limits = server_memory_limits(options_.cluster, shard, num_workers);
  router_->set_memory_limits(limits);
  router_->set_members(admission_.connections());
  const std::string warning = memory_budget_warning(options_.cluster, shard, num_workers);
  if (!warning.empty()) log_.warn(warning);
  log_.info("memory budget for unsent replies: " + describe_memory_limits(limits, options_.cluster));
}

void Server::start_checkpoints() {
  checkpointer_ = std::make_unique<ServerCheckpointer>(options_.checkpoint_interval, options_.checkpoint_root, log_);
  checkpointer_->set_rank(rank_);
  CheckpointFingerprint fingerprint = options_.fingerprint;
  fingerprint.fields.emplace_back("parameters", std::to_string(map_.total_elems()));
  if (options_.resume_dir.empty()) {
    // A restart before the first checkpoint comes back from the initial part (server/checkpointing.h).
    if (options_.checkpoint_interval > 0 && options_.cluster.on_server_failure == ServerFailurePolicy::kRestart) {
      checkpointer_->enable_initial_part(fingerprint);
    }
    return;
  }
  const std::int64_t step = restore_server(*store_, options_.resume_dir, rank_, fingerprint, log_);
  if (options_.rejoin) {
    store_->begin_catch_up(step);
    checkpointer_->keep_existing_parts();  // those the failed server wrote belong to complete checkpoints
    const bool initial = options_.resume_dir.find("initial-server-") != std::string::npos;
    log_.info(initial ? "rejoined the running job from its initial part at step " + std::to_string(step) +
                            " (it failed before the first checkpoint): the updates of this shard after it are lost; "
                            "chunks catch up to the workers' step"
                        : "rejoined the running job from checkpoint step " + std::to_string(step) +
                              ": the updates the failed server applied after it are lost; chunks catch up to the "
                              "workers' step");
  }
}

namespace {

// The request's span: named by its type ("push", "pull", "init") once it is
// decoded; "receive" (reading and decoding the message) is its first child.
const char* request_span_name(MsgType type) {
  switch (type) {
    case MsgType::kPush: return "push";
    case MsgType::kPull: return "pull";
    case MsgType::kPushChunks: return "push chunks";
    case MsgType::kPullChunks: return "pull chunks";
    case MsgType::kInit: return "init";
    default: return "request";
  }
}

}  // namespace

void Server::handle_request() {
  if (options_.mode == Mode::kSync) return handle_sync_queue();
  TraceSpan span(options_.trace, TraceLevel::kAll, "request", "server");
  std::optional<Envelope> env = receive_request();
  if (!env) {
    span.cancel();
    return;
  }
  serve_request(*env, span);
}

// Sync: what is queued is read into sync_queue_ (up to kMaxSyncBatch
// requests) and its pulls are served at once; then the oldest other request
// is served, and the loop comes back (reading what came meanwhile) before the
// next. A pull for the next step so parks before the pushes queued ahead of
// it and is answered the moment its chunk's update is applied: the worker
// copies that chunk while the server applies the next. The replies are those
// of arrival order: a pull goes first only where every chunk it names either
// cannot be answered yet (it parks, and is answered when a push makes it
// ready, as in arrival order) or has no push or init queued ahead of it (its
// weights are the same now as after those). In arrival order throughout while
// catching up after a restart (a worker's order of requests says how far the
// failed server got), and for a rejoin's probe.
void Server::handle_sync_queue() {
  // At most kMaxSyncBatch reads a turn; a request admission refuses is
  // answered at once (its refusal is the same in any order) and not queued.
  for (std::size_t reads = 0; reads < kMaxSyncBatch && sync_queue_.size() < kMaxSyncBatch; ++reads) {
    std::optional<Envelope> env = receive_request();
    if (!env) break;
    if (!admission_.allows(*env)) {
      serve_traced(*env);
      continue;
    }
    sync_queue_.push_back(std::move(*env));
  }
  const bool reorder = !store_->catching_up();
  std::size_t kept = 0;  // sync_queue_[0, kept): the requests kept, in arrival order
  for (std::size_t i = 0; i < sync_queue_.size(); ++i) {
    if (reorder && pull_goes_first(sync_queue_[i], kept)) {
      serve_traced(sync_queue_[i]);
      continue;
    }
    if (kept != i) sync_queue_[kept] = std::move(sync_queue_[i]);
    ++kept;
  }
  sync_queue_.erase(sync_queue_.begin() + static_cast<std::ptrdiff_t>(kept), sync_queue_.end());
  if (sync_queue_.empty()) return;
  serve_traced(sync_queue_.front());
  sync_queue_.erase(sync_queue_.begin());  // at most kMaxSyncBatch moves; the capacity stays
}

bool Server::pull_goes_first(const Envelope& env, std::size_t ahead) const {
  const Header& h = env.message.header;
  if ((h.type != MsgType::kPull && h.type != MsgType::kPullChunks) || h.step < 0) return false;
  const std::int64_t count = h.type == MsgType::kPullChunks ? h.version : 1;
  if (!admission_.allows(env)) return false;  // refused in its place
  try {
    for (std::int64_t i = 0; i < count; ++i) {
      const std::int64_t key = h.key + i;
      if (!store_->owns(key)) return false;  // refused in its place
      if (!store_->ready(key, h.sender, h.step)) continue;  // it parks: answered when its chunk is applied
      for (std::size_t j = 0; j < ahead; ++j) {  // answerable now: only if nothing ahead changes its chunk
        const Header& q = sync_queue_[j].message.header;
        const std::int64_t n = q.type == MsgType::kPushChunks ? q.version : 1;
        const bool writes = q.type == MsgType::kPush || q.type == MsgType::kPushChunks || q.type == MsgType::kInit;
        if (writes && key >= q.key && key - q.key < n) return false;
      }
    }
  } catch (const RequestError&) {  // answered in its place
    return false;
  }
  return true;
}

void Server::serve_traced(Envelope& env) {
  TraceSpan span(options_.trace, TraceLevel::kAll, "request", "server");
  serve_request(env, span);
}

std::optional<Envelope> Server::receive_request() {
  PeerId from;
  try {
    TraceSpan receive(options_.trace, TraceLevel::kAll, "receive", "server");
    std::optional<Envelope> env = router_->receive(milliseconds(0), &from);
    if (env) {
      receive.arg("bytes", env->message.header.num_elems * static_cast<std::int64_t>(dtype_bytes(env->message.header.dtype)));
    } else {
      receive.cancel();  // nothing came: no request span either
    }
    return env;
  } catch (const ProtocolError& e) {  // answered here; the loop reads on at its next turn
    ++bad_requests_;
    warnings_.warn(from.name(), std::string("malformed request: ") + e.what());
    reply_error(from, Header{}, Status::kBadRequest, e.what());
    return std::nullopt;
  }
}

void Server::serve_request(Envelope& env, TraceSpan& span) {
  const Header& h = env.message.header;
  span.rename(request_span_name(h.type));
  span.arg("chunk", h.key).arg("worker", h.sender).arg("step", h.step);
  try {
    admission_.admit(env);
    serve(env.from, env.message);
  } catch (const RequestError& e) {
    log_.debug(e.what());
    reply_error_each(env.from, env.message.header, e.status(), e.what());
  } catch (const TransportError& e) {
    // The reply's peer has gone (ROUTER_MANDATORY): nothing to answer.
    note_unsent(e);
  }
}

void Server::reply_error(const PeerId& to, const Header& request, Status status, const std::string& text) {
  try {
    router_->send_error(to, request, Role::kServer, rank_, status, text);
  } catch (const TransportError& e) {
    note_unsent(e);
  }
}

void Server::reply_error_each(const PeerId& to, const Header& request, Status status, const std::string& text) {
  if (request.type != MsgType::kPushChunks && request.type != MsgType::kPullChunks) {
    return reply_error(to, request, status, text);
  }
  // A run (decoded: 1..kMaxChunksPerMessage chunks): every chunk's request
  // gets its answer, as the worker waits for each.
  for (std::int64_t i = 0; i < request.version; ++i) reply_error(to, chunk_request(request, i, 0), status, text);
}

void Server::park(const PeerId& from, const Header& h) {
  int& count = parked_per_peer_[from];
  const auto limit = static_cast<int>(kMaxParkedPerChunk * std::max<std::size_t>(map_.chunks_of(rank_).size(), 1));
  if (count >= limit) {
    if (count == 0) parked_per_peer_.erase(from);
    throw RequestError(Status::kRejected, "pull of chunk " + std::to_string(h.key) + " for step " +
                                              std::to_string(h.step) + ": this connection already has " +
                                              std::to_string(limit) + " pulls waiting; refused");
  }
  ++count;
  parked_[h.key].push_back(ParkedPull{from, h, std::chrono::steady_clock::now()});
}

void Server::unpark(const ParkedPull& p) {
  auto it = parked_per_peer_.find(p.from);
  if (it != parked_per_peer_.end() && --it->second <= 0) parked_per_peer_.erase(it);
}

void Server::expire_parked() {
  const auto now = std::chrono::steady_clock::now();
  const auto limit = milliseconds(options_.cluster.timeout_ms);
  for (auto it = parked_.begin(); it != parked_.end();) {
    std::vector<ParkedPull>& pulls = it->second;
    for (auto p = pulls.begin(); p != pulls.end();) {
      if (now - p->since < limit) {
        ++p;
        continue;
      }
      ++expired_pulls_;
      unpark(*p);
      reply_error(p->from, p->request, Status::kRejected,
                  "pull of chunk " + std::to_string(p->request.key) + " for step " + std::to_string(p->request.step) +
                      " by worker " + std::to_string(p->request.sender) + ": not answerable within " +
                      std::to_string(options_.cluster.timeout_ms) + " ms (cluster.timeout_ms); dropped");
      p = pulls.erase(p);
    }
    it = pulls.empty() ? parked_.erase(it) : std::next(it);
  }
}

void Server::serve(const PeerId& from, const Message& msg) {
  switch (msg.header.type) {
    case MsgType::kInit: return serve_init(from, msg);
    case MsgType::kPush: return serve_push(from, msg);
    case MsgType::kPull: return serve_pull(from, msg.header);
    case MsgType::kPushChunks:
    case MsgType::kPullChunks: return serve_chunks(from, msg);
    default:
      throw RequestError(Status::kBadRequest, "unexpected " + std::string(to_string(msg.header.type)) +
                                                  " request: a server takes init, push, pull, push-chunks and pull-chunks");
  }
}

bool Server::catch_up(const Header& h, bool pull) {
  return store_->catching_up() && store_->catch_up(h.sender, h.key, h.step, pull);
}

void Server::serve_init(const PeerId& from, const Message& msg) {
  const Header& h = msg.header;
  store_->init(h.key, msg.float_payload(scratch_));
  checkpointer_->after_init(*store_);  // the last chunk's init: the initial part, before its reply
  Header r = h;
  r.type = MsgType::kInitReply;
  reply(from, r);
  answer_parked(h.key);
}

void Server::serve_push(const PeerId& from, const Message& msg) {
  const Header& h = msg.header;
  const bool skip = h.aux == kPushSkip;
  const bool caught_up = catch_up(h, false);
  const PushOutcome out = skip ? store_->skip(h.sender, h.key, h.step)
                               : store_->push(h.sender, msg, scratch_);  // bfloat16 widened in the update's pass
  if (out.clock_advanced || caught_up) {
    checkpointer_->at_step_boundary(*store_, h.key);  // before the reply: see server/checkpointing.h
  }
  Header r = h;
  r.type = MsgType::kPushReply;
  r.version = out.version;
  r.aux = out.staleness;
  reply(from, r);
  // A skip may advance an ssp clock; a rejoined server's catch-up may move the version.
  if (out.applied || skip || caught_up) answer_parked(h.key);
}

void Server::serve_pull(const PeerId& from, const Header& h) {
  store_->num_elems(h.key);  // ownership check before parking
  if (catch_up(h, true)) {  // a rejoined server: the pull says how far it got
    checkpointer_->at_step_boundary(*store_, h.key);
    answer_parked(h.key);
  }
  if (store_->ready(h.key, h.sender, h.step)) {
    reply_pull(from, h);
  } else {
    park(from, h);
  }
}

void Server::check_run(const Header& h, bool has_payload, std::vector<std::int64_t>& sizes) const {
  sizes.clear();
  std::int64_t total = 0;
  for (std::int64_t i = 0; i < h.version; ++i) {
    sizes.push_back(store_->num_elems(h.key + i));  // RequestError (not owner) for a chunk not held here
    total += sizes.back();
  }
  if (has_payload && h.num_elems != total) {
    throw RequestError(Status::kBadRequest, std::string(to_string(h.type)) + " of chunks " + std::to_string(h.key) +
                                                ".." + std::to_string(h.key + h.version - 1) + ": " +
                                                std::to_string(h.num_elems) + " elements for chunks of " +
                                                std::to_string(total));
  }
}

void Server::serve_chunks(const PeerId& from, const Message& msg) {
  const Header& h = msg.header;
  ++run_requests_;
  run_chunks_ += h.version;
  try {
    check_run(h, msg.has_payload, run_sizes_);
  } catch (const RequestError& e) {
    reply_error_each(from, h, e.status(), e.what());
    return;
  }
  const auto* bytes = static_cast<const std::byte*>(msg.payload.data());
  std::size_t offset = 0;
  for (std::int64_t i = 0; i < h.version; ++i) {
    const std::int64_t elems = msg.has_payload ? run_sizes_[static_cast<std::size_t>(i)] : 0;
    Message one;
    one.header = chunk_request(h, i, elems);
    one.has_payload = msg.has_payload;
    const std::size_t length = static_cast<std::size_t>(elems) * dtype_bytes(h.dtype);
    if (msg.has_payload) one.payload = Buffer::borrow(bytes + offset, length);  // lives as long as msg
    offset += length;
    try {
      if (one.header.type == MsgType::kPush) {
        serve_push(from, one);
      } else {
        serve_pull(from, one.header);
      }
    } catch (const RequestError& e) {
      log_.debug(e.what());
      reply_error(from, one.header, e.status(), e.what());
    } catch (const TransportError& e) {
      note_unsent(e);  // that chunk's reply could not go; the others are still served
    }
  }
}

void Server::reply_pull(const PeerId& to, const Header& request, std::int64_t parked_us) {
  const WeightsSnapshot snap = store_->snapshot(request.sender, request.key, request.step);
  Header r = request;
  r.type = MsgType::kPullReply;
  r.version = snap.version;
  if (request.step == kPullRejoinProbe) r.step = store_->next_step(request.sender, request.key);
  r.aux = parked_us;
  if (pull_reply_dtype(request) == DType::kBFloat16) {
    std::shared_ptr<const std::vector<std::uint16_t>> values = narrowed(request.key, snap);
    reply(to, r, Payload::bfloat16(std::span<const std::uint16_t>(*values), values));
    return;
  }
  reply(to, r, Payload::floats(snap.weights->values, snap.weights));
}

std::shared_ptr<const std::vector<std::uint16_t>> Server::narrowed(std::int64_t key, const WeightsSnapshot& snap) {
  NarrowedWeights& n = narrowed_[key];
  if (n.values && n.version == snap.version) return n.values;  // this version is already narrowed
  if (!n.values || n.values.use_count() > 1) {  // a reply still sends the old one: a new buffer
    n.values = std::make_shared<std::vector<std::uint16_t>>(snap.weights->values.size());
  }
  n.values->resize(snap.weights->values.size());
  to_bfloat16(snap.weights->values, *n.values);
  n.version = snap.version;
  return n.values;
}

void Server::answer_parked(std::int64_t key) {
  auto it = parked_.find(key);
  if (it == parked_.end()) return;
  std::vector<ParkedPull> still;
  for (ParkedPull& p : it->second) {
    if (!store_->ready(key, p.request.sender, p.request.step)) {
      still.push_back(std::move(p));
      continue;
    }
    unpark(p);
    try {
      const auto parked = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - p.since);
      reply_pull(p.from, p.request, parked.count());
    } catch (const TransportError& e) {
      note_unsent(e);
    }
  }
  if (still.empty()) {
    parked_.erase(it);
  } else {
    it->second = std::move(still);
  }
}

void Server::reply(const PeerId& to, Header header, Payload payload) {
  TraceSpan span(options_.trace, TraceLevel::kAll, header.type == MsgType::kPullReply ? "reply pull" : "reply", "server");
  span.arg("chunk", header.key).arg("worker", header.sender);
  header.role = Role::kServer;
  header.sender = rank_;
  header.status = Status::kOk;
  router_->send(to, header, std::move(payload));
}

}  // namespace pstrain
