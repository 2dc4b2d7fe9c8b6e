// Skip pushes (workload.on_nonfinite = "skip"): a worker that saw a
// non-finite loss or gradient contributes nothing to a step. Through the
// store (no sockets), with exact values: sync counts it as an arrival and
// averages over those that contributed (none: the version advances, the
// weights stay); async applies nothing; ssp advances the worker's clock. And
// the wire rule: a skip push has aux = kPushSkip and no payload.
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "common/base/errors.h"
#include "common/wire/protocol.h"
#include "server/shard_store.h"
#include "tests/support/throw_text.h"

using namespace pstrain;

namespace {

struct Fixture {
  ParamLayout layout;
  ShardMap map;
  OptimizerConfig sgd;
  explicit Fixture(std::int64_t n = 4) {
    layout.add("w", {n});
    map = ShardMap(layout, 1, 1 << 20);
    sgd.name = "sgd";
    sgd.momentum = 0.0;
    sgd.weight_decay = 0.0;
  }
};

StoreOptions options(Mode mode, const OptimizerConfig& optimizer, int bound = 0) {
  StoreOptions o;
  o.consistency = ConsistencyOptions{mode, bound};
  o.optimizer = optimizer;
  return o;
}

std::vector<float> constant(float v) { return std::vector<float>(4, v); }

using pstrain::test::thrown_text;  // tests/support/throw_text.h

Header skip_header() {
  Header h;
  h.type = MsgType::kPush;
  h.role = Role::kWorker;
  h.sender = 1;
  h.request_id = 5;
  h.key = 3;
  h.step = 7;
  h.aux = kPushSkip;
  return h;
}

std::string decode_error(const Header& h, std::size_t payload_bytes, bool with_payload) {
  std::vector<Buffer> frames;
  frames.push_back(encode_header(h));
  if (with_payload) frames.push_back(Buffer::zeros(payload_bytes));
  return pstrain::test::thrown_text<ProtocolError>([&] { decode_message(frames, {}); });
}

}  // namespace

TEST_CASE("sync: the mean is over the workers that contributed; skips are arrivals in rank order") {
  Fixture f;
  ShardStore store(f.map, 0, 3, options(Mode::kSync, f.sgd));
  store.init(0, constant(10.0f));

  SUBCASE("a skip by the lowest rank, arriving first") {
    CHECK_FALSE(store.skip(0, 0, 0).applied);
    CHECK_FALSE(store.push(2, 0, 0, constant(6.0f), 0.5).applied);
    CHECK(store.version(0) == 0);
    CHECK(store.push(1, 0, 0, constant(2.0f), 1.0).applied);  // rank 1's rate: the lowest contributing rank's
    CHECK(store.version(0) == 1);
    CHECK(store.snapshot(0, 0).values() == constant(6.0f));  // 10 - 1.0 * (2 + 6) / 2
  }
  SUBCASE("a skip arriving last completes the step") {
    CHECK_FALSE(store.push(2, 0, 0, constant(6.0f), 1.0).applied);
    CHECK_FALSE(store.push(0, 0, 0, constant(3.0f), 1.0).applied);
    CHECK(store.skip(1, 0, 0).applied);
    CHECK(store.snapshot(0, 0).values() == constant(5.5f));  // 10 - (3 + 6) / 2
  }
  SUBCASE("a skip in the middle does not hold later ranks' early gradients back") {
    CHECK_FALSE(store.push(2, 0, 0, constant(9.0f), 1.0).applied);  // early: waits for ranks 0, 1
    CHECK_FALSE(store.skip(1, 0, 0).applied);
    CHECK(store.push(0, 0, 0, constant(3.0f), 1.0).applied);
    CHECK(store.snapshot(0, 0).values() == constant(4.0f));  // 10 - (3 + 9) / 2
  }
  SUBCASE("nobody contributed: no update, but the version advances and the next step goes on") {
    CHECK_FALSE(store.skip(2, 0, 0).applied);
    CHECK_FALSE(store.skip(0, 0, 0).applied);
    CHECK_FALSE(store.ready(0, 0, 1));
    CHECK(store.skip(1, 0, 0).applied);
    CHECK(store.version(0) == 1);
    CHECK(store.ready(0, 0, 1));  // pulls for step 1 are answered
    CHECK(store.snapshot(0, 0).values() == constant(10.0f));
    CHECK(store.stats().empty_updates == 1);
    CHECK(store.stats().updates_applied == 0);
    // Step 1 is an ordinary step.
    CHECK_FALSE(store.push(0, 0, 1, constant(1.0f), 1.0).applied);
    CHECK_FALSE(store.push(1, 0, 1, constant(2.0f), 1.0).applied);
    CHECK(store.push(2, 0, 1, constant(3.0f), 1.0).applied);
    CHECK(store.snapshot(0, 0).values() == constant(8.0f));  // 10 - (1 + 2 + 3) / 3
  }
  CHECK(store.stats().partial_updates == 0);  // skips are not dropped workers
}

TEST_CASE("sync: skips are checked like pushes and counted") {
  Fixture f;
  ShardStore store(f.map, 0, 2, options(Mode::kSync, f.sgd));
  CHECK(thrown_text<RequestError>([&] { store.skip(0, 0, 0); }).find("chunk not initialized yet") != std::string::npos);
  store.init(0, constant(1.0f));
  CHECK(thrown_text<RequestError>([&] { store.skip(5, 0, 0); }).find("worker rank outside [0, 2)") != std::string::npos);
  CHECK(thrown_text<RequestError>([&] { store.skip(0, 0, 1); }).find("ahead of the chunk's version 0") != std::string::npos);
  CHECK_FALSE(store.skip(0, 0, 0).applied);
  // Worker 0's step 0 is taken by its skip: a repeat (skip or push) is acknowledged, not counted.
  CHECK_FALSE(store.skip(0, 0, 0).applied);
  CHECK_FALSE(store.push(0, 0, 0, constant(1.0f), 1.0).applied);
  CHECK(store.push(1, 0, 0, constant(4.0f), 0.5).applied);
  CHECK(store.snapshot(0, 0).values() == constant(-1.0f));  // 1 - 0.5 * 4: worker 1 alone contributed
  CHECK(store.stats().skip_pushes == 1);
  CHECK(store.stats().pushes_accepted == 2);
  CHECK(store.stats().pushes_rejected == 3);
  CHECK(store.stats().duplicate_pushes == 2);
}

TEST_CASE("sync, one worker: a skip is an empty step") {
  Fixture f;
  ShardStore store(f.map, 0, 1, options(Mode::kSync, f.sgd));
  store.init(0, constant(2.0f));
  CHECK(store.skip(0, 0, 0).applied);
  CHECK(store.version(0) == 1);
  CHECK(store.snapshot(0, 0).values() == constant(2.0f));
  CHECK(store.push(0, 0, 1, constant(1.0f), 1.0).applied);
  CHECK(store.snapshot(0, 0).values() == constant(1.0f));
}

TEST_CASE("sync: a drop after the others skipped completes an empty step") {
  Fixture f;
  ShardStore store(f.map, 0, 2, options(Mode::kSync, f.sgd));
  store.init(0, constant(2.0f));
  CHECK_FALSE(store.skip(0, 0, 0).applied);
  CHECK(store.drop_worker(1) == std::vector<std::int64_t>{0});
  CHECK(store.version(0) == 1);
  CHECK(store.snapshot(0, 0).values() == constant(2.0f));
}

TEST_CASE("async: a skip applies nothing and records the step") {
  Fixture f;
  ShardStore store(f.map, 0, 2, options(Mode::kAsync, f.sgd));
  store.init(0, constant(0.0f));
  CHECK(store.push(0, 0, 0, constant(1.0f), 1.0).applied);
  CHECK_FALSE(store.skip(1, 0, 0).applied);
  CHECK(store.version(0) == 1);
  CHECK(store.snapshot(0, 0).values() == constant(-1.0f));
  CHECK_FALSE(store.push(1, 0, 0, constant(1.0f), 1.0).applied);  // step 0 of worker 1 is taken by its skip
  CHECK(store.stats().duplicate_pushes == 1);
  CHECK(store.push(1, 0, 1, constant(2.0f), 1.0).applied);
  CHECK(store.snapshot(0, 0).values() == constant(-3.0f));
  CHECK(store.stats().skip_pushes == 1);
  CHECK(store.stats().updates_applied == 2);
}

TEST_CASE("ssp: a skip advances the worker's clock, so the others go on") {
  Fixture f;
  ShardStore store(f.map, 0, 2, options(Mode::kSsp, f.sgd, 0));
  store.init(0, constant(0.0f));
  CHECK(store.push(0, 0, 0, constant(1.0f), 1.0).applied);
  CHECK_FALSE(store.ready(0, 0, 1));  // worker 1 has not done step 0
  CHECK_FALSE(store.skip(1, 0, 0).applied);
  CHECK(store.ready(0, 0, 1));  // its skip counts as its step 0
  CHECK(store.snapshot(0, 0, 1).values() == constant(-1.0f));
}

TEST_CASE("protocol: a skip push is a push with aux = kPushSkip and no payload") {
  std::vector<Buffer> frames;
  frames.push_back(encode_header(skip_header()));
  const Message m = decode_message(frames, {});
  CHECK(m.header.type == MsgType::kPush);
  CHECK(m.header.aux == kPushSkip);
  CHECK_FALSE(m.has_payload);
  CHECK(m.header.step == 7);

  CHECK(decode_error(skip_header(), 16, true) == "push from worker 1: carries no payload, got a 16-byte payload frame");
  Header with_elems = skip_header();
  with_elems.num_elems = 4;
  CHECK(decode_error(with_elems, 0, false) == "push from worker 1: no payload but dtype/num_elems set");
  Header gradient = skip_header();
  gradient.aux = kPushGradient;
  CHECK(decode_error(gradient, 0, false) == "push from worker 1: payload frame missing");
  Header other = skip_header();
  other.aux = 2;
  CHECK(decode_error(other, 0, false) == "push from worker 1 (key 3): aux 2 is neither 0 (a gradient) nor 1 (a skip)");
  other.aux = -4;
  CHECK(decode_error(other, 16, true).find("aux -4 is neither") != std::string::npos);
}
