// scheduler/membership.h without sockets: admission at registration, ranks,
// who is live/dropped/done, the end of the job, and rejoin admission.
#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include "common/base/errors.h"
#include "scheduler/membership.h"

using namespace pstrain;
using std::chrono::milliseconds;

namespace {

const SchedulerClock::time_point kT0{std::chrono::seconds(1000)};

ParamLayout layout_of(std::int64_t n) {
  ParamLayout layout;
  layout.add("w", {n});
  return layout;
}

RegisterRequest worker(int rank = -1, std::string fingerprint = "job", std::int64_t n = 4) {
  RegisterRequest r;
  r.role = Role::kWorker;
  r.requested_rank = rank;
  r.host = "host";
  r.pid = 100 + rank;
  r.job_fingerprint = std::move(fingerprint);
  r.layout = layout_of(n);
  return r;
}

RegisterRequest server(int rank = -1, std::string endpoint = "tcp://s") {
  RegisterRequest r;
  r.role = Role::kServer;
  r.requested_rank = rank;
  r.host = "host";
  r.pid = 200 + rank;
  r.endpoint = std::move(endpoint);
  r.job_fingerprint = "job";
  return r;
}

using W = WorkerFailurePolicy;
using S = ServerFailurePolicy;

ClusterConfig cluster(W on_worker_failure = W::kContinue, S on_server_failure = S::kAbort) {
  ClusterConfig c;
  c.on_worker_failure = on_worker_failure;
  c.on_server_failure = on_server_failure;
  c.timeout_ms = 1000;
  c.max_restarts = 2;
  return c;
}

PeerId peer(const std::string& name) { return PeerId(name); }

// `prefix` then `i`: "s0".
std::string numbered(std::string prefix, int i) { return prefix.append(std::to_string(i)); }

// A job past its rendezvous: `servers` servers and `workers` workers, ranks in order.
Membership started(int servers, int workers, ClusterConfig c = cluster()) {
  Membership m(servers, workers, std::move(c));
  for (int s = 0; s < servers; ++s) m.admit(peer(numbered("s", s)), server(s, numbered("tcp://s", s)), kT0);
  for (int w = 0; w < workers; ++w) m.admit(peer(numbered("w", w)), worker(w), kT0);
  m.assign_ranks();
  return m;
}

template <class F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const ProtocolError& e) {
    return e.what();
  }
  return "(not refused)";
}

// Whether `f` is refused for now (RetryLaterError: kRetryLater), not for good.
template <class F>
bool refused_for_now(F&& f) {
  try {
    f();
  } catch (const RetryLaterError&) {
    return true;
  } catch (const ProtocolError&) {
    return false;
  }
  return false;
}

}  // namespace

TEST_CASE("membership: registration admits each role up to its count, then refuses one too many") {
  Membership m(1, 2, cluster());
  m.admit(peer("a"), worker(), kT0);
  CHECK_FALSE(m.complete());
  m.admit(peer("b"), worker(), kT0);
  CHECK(refusal([&] { m.admit(peer("c"), worker(), kT0); }).find("is one too many") != std::string::npos);
  CHECK(m.roster() == "registered 0/1 servers and 2/2 workers");
  CHECK_FALSE(m.complete());
  m.admit(peer("s"), server(), kT0);
  CHECK(m.complete());
}

TEST_CASE("membership: a requested rank at the count, a rank asked twice, another job, another layout are refused") {
  Membership m(0, 3, cluster());
  CHECK(refusal([&] { m.admit(peer("a"), worker(3), kT0); }) ==
        "register: requested worker rank 3 is outside [0, 3)");
  m.admit(peer("a"), worker(2), kT0);  // the highest rank is in range
  CHECK(refusal([&] { m.admit(peer("b"), worker(2), kT0); }) == "register: worker rank 2 requested twice");
  CHECK(refusal([&] { m.admit(peer("b"), worker(-1, "other"), kT0); }).find("runs a different job") !=
        std::string::npos);
  CHECK(refusal([&] { m.admit(peer("b"), worker(-1, "job", 5), kT0); }).find("different model layout") !=
        std::string::npos);
  CHECK(m.all().size() == 1);
}

TEST_CASE("membership: requested ranks are kept, the rest fill the gaps in arrival order") {
  Membership m(0, 4, cluster());
  m.admit(peer("a"), worker(), kT0);
  m.admit(peer("b"), worker(1), kT0);
  m.admit(peer("c"), worker(), kT0);
  m.admit(peer("d"), worker(3), kT0);
  m.assign_ranks();
  CHECK(m.all()[0].rank == 0);
  CHECK(m.all()[1].rank == 1);
  CHECK(m.all()[2].rank == 2);
  CHECK(m.all()[3].rank == 3);

  Membership n(0, 3, cluster());
  n.admit(peer("a"), worker(), kT0);
  n.admit(peer("b"), worker(0), kT0);
  n.admit(peer("c"), worker(), kT0);
  n.assign_ranks();
  CHECK(n.all()[0].rank == 1);  // rank 0 was asked for: the first free one after it
  CHECK(n.all()[1].rank == 0);
  CHECK(n.all()[2].rank == 2);
}

TEST_CASE("membership: the job's reply has the servers' endpoints by rank and the first worker's layout") {
  Membership m(2, 1, cluster());
  m.admit(peer("s1"), server(1, "tcp://one"), kT0);
  m.admit(peer("s0"), server(-1, "tcp://zero"), kT0);
  m.admit(peer("w"), worker(), kT0);
  m.assign_ranks();
  CHECK_FALSE(m.layout_mismatch());
  const RegisterReply reply = m.job_reply();
  CHECK(reply.num_servers == 2);
  CHECK(reply.num_workers == 1);
  CHECK(reply.server_endpoints == std::vector<std::string>{"tcp://zero", "tcp://one"});
  CHECK(same_layout(reply.layout, layout_of(4)));
  m.find(Role::kWorker, 0)->token = "t0";
  CHECK(m.worker_tokens() == std::vector<std::string>{"t0"});
}

TEST_CASE("membership: a worker whose layout differs from the first is the rendezvous' failure") {
  Membership m = started(0, 2);
  m.all()[1].request.layout = layout_of(5);
  const auto mismatch = m.layout_mismatch();
  REQUIRE(mismatch);
  CHECK(*mismatch ==
        "worker 1 has a different model layout (1 tensors, 5 parameters) from worker 0 (1 tensors, 4 parameters)");
}

TEST_CASE("membership: who is live, who a barrier waits for, the live ranks in order") {
  Membership m = started(1, 4);
  CHECK(m.live_workers() == 4);
  m.drop(*m.find(Role::kWorker, 1), kT0);
  m.mark_done(*m.find(Role::kWorker, 3));
  CHECK(m.live_workers() == 3);  // done is still in the job
  CHECK(m.live_worker_list() == std::vector<int>{0, 2, 3});
  CHECK(m.live_worker_ranks() == "0,2,3");
  CHECK(m.barrier_members() == 2);  // neither dropped nor done
  CHECK(m.on_connection(peer("w2")) == m.find(Role::kWorker, 2));
  CHECK(m.on_connection(peer("nobody")) == nullptr);
}

TEST_CASE("membership: the end waits for every worker done, or dropped for good") {
  Membership m = started(0, 2);
  CHECK_FALSE(m.workers_done(kT0));
  m.mark_done(*m.find(Role::kWorker, 0));
  CHECK_FALSE(m.workers_done(kT0));
  m.drop(*m.find(Role::kWorker, 1), kT0);
  CHECK(m.workers_done(kT0));  // "continue": a dropped worker never comes back
}

TEST_CASE("membership: under restart the end waits for a dropped worker for timeout_ms, not a moment longer") {
  Membership m = started(0, 2, cluster(W::kRestart));
  m.mark_done(*m.find(Role::kWorker, 0));
  Member& w1 = *m.find(Role::kWorker, 1);
  m.drop(w1, kT0);
  CHECK(m.may_rejoin(w1, kT0 + milliseconds(999)));
  CHECK_FALSE(m.workers_done(kT0 + milliseconds(999)));
  CHECK_FALSE(m.may_rejoin(w1, kT0 + milliseconds(1000)));
  CHECK(m.workers_done(kT0 + milliseconds(1000)));
  w1.rejoins = 2;  // max_restarts used up
  CHECK_FALSE(m.may_rejoin(w1, kT0));
  w1.rejoins = 0;
  w1.request.job_fingerprint = "mode=allreduce collective=gloo";  // allreduce workers do not rejoin yet
  CHECK_FALSE(m.may_rejoin(w1, kT0));
}

TEST_CASE("membership: a worker rejoin is admitted only for a dropped rank of this job, under restart") {
  Membership m = started(0, 3, cluster(W::kRestart));
  const std::string who = "worker rank 1 from host (pid 7)";
  CHECK(refused_for_now([&] { m.admit_worker_rejoin(worker(1), who); }));  // its failure may not be noticed yet
  CHECK(refusal([&] { m.admit_worker_rejoin(worker(1), who); }) ==
        "rejoin of " + who +
            ": refused, worker 1 is alive (pid 101); only a worker dropped from the job can be taken back");
  m.mark_done(*m.find(Role::kWorker, 2));
  CHECK(refusal([&] { m.admit_worker_rejoin(worker(2), who); }).find("worker 2 has finished") != std::string::npos);
  CHECK_FALSE(refused_for_now([&] { m.admit_worker_rejoin(worker(2), who); }));
  CHECK(refusal([&] { m.admit_worker_rejoin(worker(3), who); }).find("the job has no worker rank 3 (it has 3") !=
        std::string::npos);
  CHECK(refusal([&] { m.admit_worker_rejoin(worker(-1), who); }).find("no worker rank -1") != std::string::npos);
  Member& w1 = *m.find(Role::kWorker, 1);
  m.drop(w1, kT0);
  w1.told_dropped = true;
  CHECK(refusal([&] { m.admit_worker_rejoin(worker(1, "other"), who); }).find("runs a different job") !=
        std::string::npos);
  CHECK(refusal([&] { m.admit_worker_rejoin(worker(1, "job", 5), who); }).find("model layout differs") !=
        std::string::npos);
  CHECK(&m.admit_worker_rejoin(worker(1), who) == &w1);
  m.take_back_worker(w1, peer("new"), worker(1), "tok", kT0 + milliseconds(5));
  CHECK_FALSE(w1.dropped);
  CHECK_FALSE(w1.told_dropped);
  CHECK(w1.rejoins == 1);
  CHECK(w1.token == "tok");
  CHECK(w1.routing_id == peer("new"));
  CHECK(w1.last_seen == kT0 + milliseconds(5));
  CHECK(m.live_workers() == 3);
}

TEST_CASE("membership: a rank taken back max_restarts times is refused; so is any rejoin unless restart") {
  Membership m = started(0, 1, cluster(W::kRestart));
  Member& w0 = *m.find(Role::kWorker, 0);
  m.drop(w0, kT0);
  w0.rejoins = 2;
  CHECK(refusal([&] { m.admit_worker_rejoin(worker(0), "w"); }) ==
        "rejoin of w: refused, worker 0 was already taken back 2 times (cluster.max_restarts = 2)");
  w0.rejoins = 1;
  CHECK(&m.admit_worker_rejoin(worker(0), "w") == &w0);

  Membership c = started(0, 1, cluster(W::kContinue));
  c.drop(*c.find(Role::kWorker, 0), kT0);
  CHECK(refusal([&] { c.admit_worker_rejoin(worker(0), "w"); }) ==
        "rejoin of w: refused, cluster.on_worker_failure is \"continue\", not \"restart\"");
}

TEST_CASE("membership: a server takes back its rank only while restarting, until its deadline") {
  Membership m = started(2, 1, cluster(W::kAbort, S::kRestart));
  const std::string who = "rejoin of a server from host (pid 9)";
  CHECK(refusal([&] { m.admit_server_rejoin(server(1), who, kT0 + milliseconds(250)); }) ==
        who + " as rank 1: refused: server 1 is alive (pid 201, heard 250 ms ago); only a failed server's rank can be "
              "taken back");
  CHECK(refused_for_now([&] { m.admit_server_rejoin(server(1), who, kT0); }));  // under restart: not noticed yet
  CHECK(refusal([&] { m.admit_server_rejoin(server(2), who, kT0); }).find("R in [0, 2)") != std::string::npos);
  CHECK_FALSE(refused_for_now([&] { m.admit_server_rejoin(server(2), who, kT0); }));
  Member& s1 = *m.find(Role::kServer, 1);
  m.begin_restart(s1, "server 1 failed: boom", kT0);
  CHECK(s1.restarting);
  CHECK(s1.restart_deadline == kT0 + milliseconds(1000));
  CHECK(s1.failure == "server 1 failed: boom");
  CHECK(&m.admit_server_rejoin(server(1), who, kT0) == &s1);
  m.take_back_server(s1, peer("s1-new"), server(1, "tcp://new"), "tok", kT0 + milliseconds(3));
  CHECK_FALSE(s1.restarting);
  CHECK(s1.restarts == 1);
  CHECK(m.job_reply().server_endpoints[1] == "tcp://new");

  Membership a = started(1, 1, cluster(W::kAbort, S::kAbort));
  CHECK(refusal([&] { a.admit_server_rejoin(server(0), who, kT0); })
            .ends_with(" (and cluster.on_server_failure is \"abort\")"));
  CHECK_FALSE(refused_for_now([&] { a.admit_server_rejoin(server(0), who, kT0); }));  // for good
}

TEST_CASE("membership: a per-worker key binds its rank; a shared key any") {
  RegisterRequest r = worker();
  bind_rank_to_key(KeyOwner{Role::kWorker, 1}, "worker-1", r);
  CHECK(r.requested_rank == 1);
  RegisterRequest other = worker(0);
  CHECK(refusal([&] { bind_rank_to_key(KeyOwner{Role::kWorker, 1}, "worker-1", other); }) ==
        "register: a worker-1 key cannot register as worker rank 0: refused");
  RegisterRequest shared = worker(2);
  bind_rank_to_key(KeyOwner{Role::kWorker, -1}, "worker", shared);
  CHECK(shared.requested_rank == 2);
}

TEST_CASE("membership: find by role and rank once ranks are assigned, for either role, and nothing else") {
  Membership m(0, 3, cluster());
  m.admit(peer("a"), worker(), kT0);
  m.admit(peer("b"), worker(0), kT0);
  m.admit(peer("c"), worker(), kT0);
  CHECK(m.find(Role::kWorker, 0) == nullptr);  // before the ranks: none has rank 0 yet
  m.assign_ranks();
  CHECK(m.find(Role::kWorker, 0) == &m.all()[1]);
  CHECK(m.find(Role::kWorker, 1) == &m.all()[0]);
  CHECK(m.find(Role::kWorker, 2) == &m.all()[2]);
  CHECK(m.find(Role::kWorker, 3) == nullptr);
  CHECK(m.find(Role::kWorker, -1) == nullptr);
  CHECK(m.find(Role::kServer, 0) == nullptr);
  CHECK(m.find(Role::kScheduler, 0) == nullptr);

  Membership n = started(3, 2);
  for (int s = 0; s < 3; ++s) CHECK(n.find(Role::kServer, s)->routing_id == peer(numbered("s", s)));
  for (int w = 0; w < 2; ++w) CHECK(n.find(Role::kWorker, w)->routing_id == peer(numbered("w", w)));
  CHECK(n.find(Role::kServer, 3) == nullptr);
}

TEST_CASE("membership: the live list and a barrier's count follow done, drop and take back, done counted once") {
  Membership m = started(1, 5, cluster(W::kRestart));
  CHECK(m.barrier_members() == 5);
  m.mark_done(*m.find(Role::kWorker, 4));
  m.mark_done(*m.find(Role::kWorker, 4));  // said twice: counted once
  CHECK(m.barrier_members() == 4);
  CHECK(m.live_worker_list() == std::vector<int>{0, 1, 2, 3, 4});
  m.drop(*m.find(Role::kWorker, 2), kT0);
  CHECK(m.barrier_members() == 3);
  CHECK(m.live_worker_list() == std::vector<int>{0, 1, 3, 4});
  m.mark_done(*m.find(Role::kWorker, 2));  // a dropped worker's done changes no count
  CHECK(m.barrier_members() == 3);
  m.mark_done(*m.find(Role::kServer, 0));  // a server's done is no worker's: no count changes
  CHECK(m.find(Role::kServer, 0)->done);
  CHECK(m.barrier_members() == 3);
  Member& w2 = *m.find(Role::kWorker, 2);
  m.take_back_worker(w2, peer("new"), worker(2), "tok", kT0);
  CHECK(m.barrier_members() == 4);  // back, and not done
  CHECK(m.live_worker_list() == std::vector<int>{0, 1, 2, 3, 4});
  CHECK(m.live_workers() == 5);
  CHECK(m.find(Role::kWorker, 2) == &w2);  // the index still finds it
}

TEST_CASE("membership: with 1,024 workers the counts and the end agree with the flags") {
  Membership m = started(4, 1024);
  CHECK(m.live_workers() == 1024);
  for (int w = 0; w < 1024; w += 2) m.mark_done(*m.find(Role::kWorker, w));
  for (int w = 1; w < 1024; w += 4) m.drop(*m.find(Role::kWorker, w), kT0);
  int waiting = 0;
  for (const Member& n : m.all()) waiting += n.role == Role::kWorker && !n.done && !n.dropped ? 1 : 0;
  CHECK(m.barrier_members() == waiting);
  CHECK(waiting == 256);
  CHECK(m.live_workers() == 768);
  CHECK_FALSE(m.workers_done(kT0));
  for (int w = 3; w < 1024; w += 4) m.mark_done(*m.find(Role::kWorker, w));
  CHECK(m.barrier_members() == 0);
  CHECK(m.workers_done(kT0));
}

namespace {
ClusterConfig elastic(int max_workers, int min_workers = 1) {
  ClusterConfig c = cluster();
  c.num_workers = 2;
  c.min_workers = min_workers;
  c.max_workers = max_workers;
  return c;
}
}  // namespace

TEST_CASE("membership: slots past cluster.workers begin vacant; nobody waits for them") {
  Membership m = started(1, 2, elastic(4));
  CHECK(m.slots() == 4);
  CHECK(m.complete());  // the rendezvous waits for cluster.workers only
  CHECK(m.live_worker_ranks() == "0,1");
  CHECK(m.barrier_members() == 2);
  CHECK_FALSE(m.vacant(1));
  CHECK(m.vacant(2));
  CHECK(m.vacant(3));
  CHECK_FALSE(m.vacant(4));
  CHECK(m.find(Role::kWorker, 3) == nullptr);
  for (Member& n : m.all()) m.mark_done(n);
  CHECK(m.workers_done(kT0));
}

TEST_CASE("membership: a join takes a vacant slot, the lowest unless it asks for one, and counts from then on") {
  Membership m = started(1, 2, elastic(4));
  CHECK(m.admit_worker_join(worker(), "a joiner") == 2);
  Member& two = m.add_joined_worker(peer("j2"), worker(), 2, "t2", kT0);
  CHECK(two.joined);
  CHECK(m.find(Role::kWorker, 2) == &two);
  // Joining until its change's boundary: its slot taken, not live, not waited for.
  CHECK(two.joining);
  CHECK_FALSE(m.vacant(2));
  CHECK(m.live_worker_ranks() == "0,1");
  CHECK(m.barrier_members() == 2);
  CHECK(m.admit_worker_join(worker(3), "a joiner") == 3);
  Member& three = m.add_joined_worker(peer("j3"), worker(3), 3, "t3", kT0);
  m.enter_joined(two);
  m.enter_joined(three);
  CHECK_FALSE(two.joining);
  CHECK(m.live_worker_ranks() == "0,1,2,3");
  CHECK(m.barrier_members() == 4);
  CHECK(m.worker_tokens().size() == 4);
  CHECK(m.worker_tokens()[3] == "t3");
  CHECK(m.on_connection(peer("j3"))->rank == 3);
  // A retired worker leaves gracefully: not waited for, its slot vacant again.
  m.retire(*m.find(Role::kWorker, 3));
  CHECK(m.live_worker_ranks() == "0,1,2");
  CHECK(m.barrier_members() == 3);
  CHECK(m.vacant(3));
  CHECK_FALSE(m.find(Role::kWorker, 3)->dropped);
  const std::size_t entries = m.all().size();
  CHECK(m.admit_worker_join(worker(), "a joiner") == 3);
  Member& again = m.add_joined_worker(peer("j3b"), worker(), 3, "t3b", kT0);
  CHECK(m.all().size() == entries);  // the retired entry is reused
  m.enter_joined(again);
  CHECK(m.live_worker_ranks() == "0,1,2,3");
  for (Member& n : m.all()) m.mark_done(n);
  CHECK(m.workers_done(kT0));
}

TEST_CASE("membership: a joiner that leaves before its boundary is abandoned: its slot vacant, nothing waits for it") {
  Membership m = started(1, 2, elastic(3));
  Member& two = m.add_joined_worker(peer("j2"), worker(), m.admit_worker_join(worker(), "w"), "t", kT0);
  m.abandon_join(two);
  CHECK_FALSE(two.joining);
  CHECK(m.vacant(2));
  CHECK(m.live_worker_ranks() == "0,1");
  m.mark_done(two);
  CHECK(m.barrier_members() == 2);
  for (int r : {0, 1}) m.mark_done(*m.find(Role::kWorker, r));
  CHECK(m.workers_done(kT0));
  CHECK(m.admit_worker_join(worker(), "w") == 2);  // taken again
}

TEST_CASE("membership: a join is refused with its reason: full job, rank in use or out of range, another job or model") {
  Membership m = started(1, 2, elastic(3));
  CHECK(refusal([&] { m.admit_worker_join(worker(1), "worker from host (pid 7)"); }) ==
        "join of worker from host (pid 7): refused, worker rank 1 is in use");
  CHECK(refusal([&] { m.admit_worker_join(worker(3), "w"); }) ==
        "join of w: refused, worker rank 3 is outside the job's slots [0, 3) (cluster.max_workers)");
  CHECK(refusal([&] { m.admit_worker_join(worker(-1, "other"), "w"); }).find("runs a different job") !=
        std::string::npos);
  CHECK(refusal([&] { m.admit_worker_join(worker(-1, "job", 5), "w"); }).find("different model layout") !=
        std::string::npos);
  m.add_joined_worker(peer("j2"), worker(), m.admit_worker_join(worker(), "w"), "t", kT0);
  CHECK(refusal([&] { m.admit_worker_join(worker(), "w"); }) ==
        "join of w: refused, the job is full (3 workers in its 3 slots, cluster.max_workers)");
  // Not elastic: every join is refused, saying so.
  Membership fixed = started(1, 2);
  CHECK(refusal([&] { fixed.admit_worker_join(worker(), "w"); }).find("the job is not elastic") != std::string::npos);
  // Before the rendezvous: for now, not for good.
  Membership early(1, 2, elastic(3));
  CHECK(refused_for_now([&] { early.admit_worker_join(worker(), "w"); }));
}

TEST_CASE("membership: a resize is bounded by cluster.min_workers and the slots") {
  const Membership m = started(1, 2, elastic(4, 2));
  CHECK_FALSE(m.resize_refusal(2).has_value());
  CHECK_FALSE(m.resize_refusal(4).has_value());
  CHECK(m.resize_refusal(1) == "the job cannot shrink to 1 workers: cluster.min_workers is 2");
  CHECK(m.resize_refusal(5) == "the job cannot grow to 5 workers: it has 4 slots (cluster.max_workers)");
}

TEST_CASE("membership: a resume at a checkpoint's members (0, 1, 3) waits for those ranks; slot 2 is vacant") {
  Membership m(1, 2, elastic(4), {0, 1, 3});
  m.admit(peer("s0"), server(0), kT0);
  CHECK(refusal([&] { m.admit(peer("w2"), worker(2), kT0); })
            .find("requested worker rank 2 is not one of the job's workers at its start (0,1,3: the members of the "
                  "checkpoint it resumes)") != std::string::npos);
  m.admit(peer("w3"), worker(3), kT0);
  m.admit(peer("wa"), worker(), kT0);
  CHECK_FALSE(m.complete());
  CHECK(m.roster() == "registered 1/1 servers and 2/3 workers");
  m.admit(peer("wb"), worker(), kT0);
  CHECK(m.complete());
  CHECK(refusal([&] { m.admit(peer("wc"), worker(), kT0); }).find("already has its 3 workers") != std::string::npos);
  m.assign_ranks();
  CHECK(m.on_connection(peer("wa"))->rank == 0);  // the unrequested ones fill the members' gaps in order
  CHECK(m.on_connection(peer("wb"))->rank == 1);
  CHECK(m.live_worker_ranks() == "0,1,3");
  CHECK(m.barrier_members() == 3);
  CHECK(m.job_reply().num_workers == 2);  // cluster.workers: the rate's base and the servers' first slots
  CHECK(m.vacant(2));
  CHECK(m.admit_worker_join(worker(), "a joiner") == 2);  // a later grow takes the vacant slot
  CHECK_THROWS_AS(Membership(1, 2, elastic(3), {0, 1, 3}), ConfigError);  // past the slots
  CHECK_THROWS_AS(Membership(1, 2, elastic(4), {1, 0}), ConfigError);     // not ascending
}
