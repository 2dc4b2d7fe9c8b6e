#include "worker/train/simulated_compute.h"

#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <utility>

namespace pstrain {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::nanoseconds;

constexpr nanoseconds kMinSpin = std::chrono::microseconds(20);
constexpr nanoseconds kMaxSpin = std::chrono::microseconds(150);  // a loaded machine's cores are for the others

// Per thread: the timer slack set, and the mean delay of its wake-ups past
// the time asked (an exponential moving average, ns).
struct WakeState {
  bool slack_set = false;
  double mean_delay_ns = 25'000.0;
};
thread_local WakeState wake_state;

nanoseconds spin_for(const WakeState& s) {
  return std::clamp(nanoseconds(static_cast<std::int64_t>(1.5 * s.mean_delay_ns)), kMinSpin, kMaxSpin);
}

// Sleeps until `wake` (steady_clock is CLOCK_MONOTONIC on Linux).
void sleep_until_monotonic(Clock::time_point wake) {
  const auto since = std::chrono::duration_cast<nanoseconds>(wake.time_since_epoch()).count();
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(since / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(since % 1'000'000'000);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

// A layer with parameters: its flat range and its share of the step's parts.
struct Part {
  std::int64_t offset, count;
  double share;
};

std::vector<Part> parts_of(const nn::Model& model) {
  std::vector<Part> parts;
  const double total = static_cast<double>(std::max<std::int64_t>(model.num_params(), 1));
  for (const auto& layer : model.layers()) {
    if (layer->param_count() <= 0) continue;
    parts.push_back({layer->param_offset(), layer->param_count(), static_cast<double>(layer->param_count()) / total});
  }
  return parts;
}

}  // namespace

void wait_until_precisely(Clock::time_point deadline) {
  WakeState& s = wake_state;
  if (!s.slack_set) {
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);  // this thread's sleeps end when asked, not up to 50 us later
    s.slack_set = true;
  }
  const Clock::time_point wake = deadline - spin_for(s);
  if (Clock::now() < wake) {
    sleep_until_monotonic(wake);
    const double delay = static_cast<double>(std::chrono::duration_cast<nanoseconds>(Clock::now() - wake).count());
    s.mean_delay_ns += (delay - s.mean_delay_ns) / 8.0;
  }
  while (Clock::now() < deadline) {
  }
}

nn::StepStats simulated_step(const nn::Model& model, double step_s, const nn::GradsReadyFn& ready,
                             const nn::ForwardGateFn& gate) {
  const std::vector<Part> parts = parts_of(model);
  const auto part_time = [step_s](double fraction) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(step_s * fraction));
  };
  Clock::time_point deadline = Clock::now();
  for (const Part& p : parts) {  // forward, first layer first
    if (gate) {
      gate(p.offset, p.count);
      deadline = std::max(deadline, Clock::now());  // the layer starts once its weights are there
    }
    deadline += part_time(p.share / 3.0);
    wait_until_precisely(deadline);
  }
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {  // backward, last layer first
    deadline += part_time(2.0 * it->share / 3.0);
    wait_until_precisely(deadline);
    if (ready) ready(it->offset, it->count);
  }
  if (parts.empty()) wait_until_precisely(deadline + part_time(1.0));
  return nn::StepStats{std::numeric_limits<double>::quiet_NaN(), 0, 0};
}

std::vector<float> simulated_gradients(std::int64_t num_elems) {
  std::vector<float> grads(static_cast<std::size_t>(std::max<std::int64_t>(num_elems, 0)));
  for (std::size_t i = 0; i < grads.size(); ++i) grads[i] = 1e-6f * static_cast<float>(static_cast<int>(i % 17) - 8);
  return grads;
}

}  // namespace pstrain
