#include "tools/bench/cuda_step.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "common/base/errors.h"
#include "common/config/config.h"
#include "worker/nn/backend.h"
#include "worker/nn/device_buffer.h"
#include "worker/nn/device_optimizer.h"
#include "worker/nn/model.h"

namespace pstrain::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct LayerShare {
  std::string layer;
  double forward_ms = 0, backward_ms = 0;
};

struct BatchResult {
  int batch = 0;
  double ms = 0, images_per_s = 0;
  double graph_ms = 0, graph_images_per_s = 0;  // 0: no CUDA graph for this backend
  double torch_ms = 0, torch_images_per_s = 0;  // 0: no PyTorch figure
  std::vector<LayerShare> layers;
};

// The median of `reps` timed calls of fn after `warmup` untimed ones, in ms; fn synchronizes.
double median_ms(int warmup, int reps, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto start = Clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

std::vector<float> images_of(int batch, std::int64_t per_image) {
  std::vector<float> v(static_cast<std::size_t>(batch * per_image));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.01f * static_cast<float>(static_cast<int>(i % 201) - 100);
  return v;
}

// The default job's optimizer (configs/default.toml): SGD, Nesterov momentum 0.9, weight decay 5e-4.
OptimizerConfig default_sgd() {
  OptimizerConfig c;
  c.name = "sgd";
  c.lr = 0.05;
  c.momentum = 0.9;
  c.nesterov = true;
  c.weight_decay = 5e-4;
  return c;
}

// Each layer's forward and backward at `batch` on its own buffers (dx skipped for the first
// parameter layer, as in a training step), each call synchronized and timed.
std::vector<LayerShare> layer_times(nn::Model& model, int batch, int reps) {
  nn::Backend& backend = model.backend();
  std::vector<LayerShare> out;
  bool first = true;
  for (const auto& layer : model.layers()) {
    const auto in_elems = static_cast<std::size_t>(batch * layer->input_dims().num_elems());
    const auto out_elems = static_cast<std::size_t>(batch * layer->output_dims().num_elems());
    nn::DeviceBuffer x(backend, in_elems * sizeof(float)), y(backend, out_elems * sizeof(float));
    nn::DeviceBuffer dy(backend, out_elems * sizeof(float)), dx(backend, in_elems * sizeof(float));
    backend.fill(x.f32(), 0.5f, in_elems);
    backend.fill(dy.f32(), 0.01f, out_elems);
    const nn::ForwardContext ctx{batch, true, 7};
    const double fwd = median_ms(3, reps, [&] {
      layer->forward(ctx, x.f32(), y.f32());
      backend.synchronize();
    });
    const bool skip_dx = first;  // the first parameter layer (and any before it) computes no dx
    const bool no_backward = first && layer->param_count() == 0;  // before the first parameter layer: none
    const double bwd = no_backward ? 0.0 : median_ms(3, reps, [&] {
      layer->backward(batch, x.f32(), y.f32(), dy.f32(), skip_dx ? nullptr : dx.f32());
      backend.synchronize();
    });
    if (layer->param_count() > 0) first = false;
    out.push_back({layer->name(), fwd, bwd});
  }
  return out;
}

BatchResult bench_batch(nn::Backend& backend, const CudaStepOptions& o, int batch) {
  nn::Model model(nn::model_spec(o.model, 1, 28, 28, 10), backend, batch);
  model.init_params(1);
  nn::DeviceOptimizer optimizer(default_sgd(), backend, model.num_params());
  const auto images = images_of(batch, 784);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(batch));
  for (int i = 0; i < batch; ++i) labels[static_cast<std::size_t>(i)] = i % 10;
  BatchResult r;
  r.batch = batch;
  r.ms = median_ms(5, o.reps, [&] {
    model.train_step(images.data(), labels.data(), batch);
    optimizer.step(model.device_params(), model.device_grads(), 0.01);
    backend.synchronize();
  });
  r.images_per_s = batch * 1e3 / r.ms;
  // The same step as one CUDA graph (workload.cuda_graphs; the warm-up captures it).
  bool graphed = false;
  const double graph_ms = median_ms(5, o.reps, [&] {
    graphed = backend.begin_graph_step(batch);
    model.train_step(images.data(), labels.data(), batch);
    optimizer.step(model.device_params(), model.device_grads(), 0.01);
    if (graphed) {
      backend.end_graph_step();
    } else {
      backend.synchronize();
    }
  });
  if (graphed) {
    r.graph_ms = graph_ms;
    r.graph_images_per_s = batch * 1e3 / graph_ms;
  }
  r.layers = layer_times(model, batch, std::max(5, o.reps / 2));
  return r;
}

// PyTorch's figures per batch from tools/torch_step_bench.py ("torch batch=B images_per_s=X ms_per_step=Y"
// lines); its version in *version. Empty when it could not run (the reason printed).
std::map<int, std::pair<double, double>> torch_figures(const CudaStepOptions& o, std::string* version) {
  std::map<int, std::pair<double, double>> out;
  std::string batches;
  for (int b : o.batches) batches += (batches.empty() ? "" : ",") + std::to_string(b);
  const std::string command = o.python + " '" + o.torch_script + "' --precision " + o.precision + " --batches " +
                              batches + " 2>&1";
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    std::printf("PyTorch: cannot run %s\n", command.c_str());
    return out;
  }
  char line[512];
  std::string tail;
  while (std::fgets(line, sizeof(line), pipe) != nullptr) {
    int batch = 0;
    double ips = 0, ms = 0;
    char v[64] = "";
    if (std::sscanf(line, "torch batch=%d images_per_s=%lf ms_per_step=%lf", &batch, &ips, &ms) == 3) {
      out[batch] = {ips, ms};
    } else if (std::sscanf(line, "torch version=%63s", v) == 1) {
      *version = v;
    } else {
      tail = line;
    }
  }
  const int status = pclose(pipe);
  if (status != 0 || out.empty()) std::printf("PyTorch: %s exited %d: %s", command.c_str(), status, tail.c_str());
  return out;
}

void print_tables(const std::string& device, const CudaStepOptions& o, const std::vector<BatchResult>& results) {
  std::printf("\n%s, %s, %s: the whole training step (upload, forward, backward, SGD update), median of %d\n",
              o.model.c_str(), device.c_str(), o.precision.c_str(), o.reps);
  std::printf("ratio: the better of pstrain's two (as usual, or one CUDA graph per step) / PyTorch\n");
  std::printf("%6s %9s %11s %9s %11s %9s %11s %7s\n", "batch", "ms/step", "images/s", "graph ms", "graph img/s",
              "torch ms", "torch img/s", "ratio");
  for (const auto& r : results) {
    char ratio[16] = "-";
    const double best = std::max(r.images_per_s, r.graph_images_per_s);
    if (r.torch_images_per_s > 0) std::snprintf(ratio, sizeof(ratio), "%.2fx", best / r.torch_images_per_s);
    std::printf("%6d %9.3f %11.0f %9.3f %11.0f %9.3f %11.0f %7s\n", r.batch, r.ms, r.images_per_s, r.graph_ms,
                r.graph_images_per_s, r.torch_ms, r.torch_images_per_s, ratio);
  }
  std::printf("\nshare of each layer (forward + backward, each synchronized), %% of the layers' sum\n%-10s", "layer");
  for (const auto& r : results) std::printf(" %8d", r.batch);
  std::printf("\n");
  for (std::size_t i = 0; i < results.front().layers.size(); ++i) {
    std::printf("%-10s", results.front().layers[i].layer.c_str());
    for (const auto& r : results) {
      double sum = 0;
      for (const auto& l : r.layers) sum += l.forward_ms + l.backward_ms;
      std::printf(" %7.1f%%", 100.0 * (r.layers[i].forward_ms + r.layers[i].backward_ms) / sum);
    }
    std::printf("\n");
  }
}

void write_json(const std::string& path, const std::string& device, const std::string& torch_version,
                const CudaStepOptions& o, const std::vector<BatchResult>& results) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) throw Error("bench_train_step: cannot write " + path);
  std::fprintf(f, "{\n  \"device\": \"%s\",\n  \"model\": \"%s\",\n  \"precision\": \"%s\",\n  \"reps\": %d,\n",
               device.c_str(), o.model.c_str(), o.precision.c_str(), o.reps);
  std::fprintf(f, "  \"torch_version\": %s,\n  \"steps\": [\n",
               torch_version.empty() ? "null" : ("\"" + torch_version + "\"").c_str());
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    std::fprintf(f, "    {\"batch\": %d, \"ms_per_step\": %.4f, \"images_per_s\": %.1f, ", r.batch, r.ms,
                 r.images_per_s);
    if (r.graph_images_per_s > 0) {
      std::fprintf(f, "\"graph_ms_per_step\": %.4f, \"graph_images_per_s\": %.1f, ", r.graph_ms, r.graph_images_per_s);
    } else {
      std::fprintf(f, "\"graph_ms_per_step\": null, \"graph_images_per_s\": null, ");
    }
    if (r.torch_images_per_s > 0) {
      std::fprintf(f, "\"torch_ms_per_step\": %.4f, \"torch_images_per_s\": %.1f, ", r.torch_ms, r.torch_images_per_s);
    } else {
      std::fprintf(f, "\"torch_ms_per_step\": null, \"torch_images_per_s\": null, ");
    }
    std::fprintf(f, "\"layers\": [");
    for (std::size_t j = 0; j < r.layers.size(); ++j) {
      std::fprintf(f, "%s{\"layer\": \"%s\", \"forward_ms\": %.4f, \"backward_ms\": %.4f}", j ? ", " : "",
                   r.layers[j].layer.c_str(), r.layers[j].forward_ms, r.layers[j].backward_ms);
    }
    std::fprintf(f, "]}%s\n", i + 1 < results.size() ? "," : "");
  }
  std::fprintf(f, "  ]\n}\n");
  std::fclose(f);
}

}  // namespace

int run_cuda_step_bench(const CudaStepOptions& o) {
  if (o.precision != "fp32" && o.precision != "tf32") {
    throw ConfigError("bench_train_step: --precision '" + o.precision + "': expected fp32 or tf32");
  }
  nn::ComputeOptions compute;
  compute.tf32 = o.precision == "tf32";
  std::string why_not;
  const std::unique_ptr<nn::Backend> backend = nn::make_cuda_backend(0, &why_not, compute);
  if (!backend) {
    std::printf("bench_train_step: --device cuda: %s; nothing measured\n", why_not.c_str());
    return 77;
  }
  const std::string device = backend->name();
  std::printf("bench_train_step: %s\n", device.c_str());
  std::vector<int> batches;  // each once: a batch size is one model and one CUDA graph on this backend
  for (int batch : o.batches) {
    if (std::find(batches.begin(), batches.end(), batch) == batches.end()) batches.push_back(batch);
  }
  std::vector<BatchResult> results;
  for (int batch : batches) {
    results.push_back(bench_batch(*backend, o, batch));
    std::printf("batch %d: %.3f ms/step, %.0f images/s\n", batch, results.back().ms, results.back().images_per_s);
    std::fflush(stdout);
  }
  std::string torch_version;
  if (!o.torch_script.empty()) {
    const auto torch = torch_figures(o, &torch_version);
    for (auto& r : results) {
      if (auto it = torch.find(r.batch); it != torch.end()) std::tie(r.torch_images_per_s, r.torch_ms) = it->second;
    }
  }
  print_tables(device, o, results);
  if (!o.json_path.empty()) write_json(o.json_path, device, torch_version, o, results);
  return 0;
}

}  // namespace pstrain::bench
