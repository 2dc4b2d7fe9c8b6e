// bench_train_step: the CPU backend's training step (forward + backward, no
// update) per model and batch size, against the machine's SGEMM rate, and
// each convolution layer against the best library convolution of the same
// shape measured in the same run:
//   oneDNN direct convolution with its preferred (blocked) layouts, inputs
//   already in those layouts (no reorders: the library's best case);
//   oneDNN convolution on plain NCHW/OIHW tensors; im2col + OpenBLAS SGEMM.
// Times are medians over --reps runs after 2 warm-up runs.
//   bench_train_step [--threads N] [--reps N] [--models a,b] [--batches 32,64] [--json FILE]
// With --device cuda, the whole training step on the GPU instead, against PyTorch
// (tools/bench/cuda_step.h); without a usable GPU it says so and exits 77:
//   bench_train_step --device cuda [--precision fp32|tf32] [--batches 64,256,512,1024]
//                    [--torch tools/torch_step_bench.py [--python python3]] [--json FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <CLI/CLI.hpp>
#include <dnnl.hpp>

#include "common/node/node_cli.h"
#include "tools/bench/cuda_step.h"
#include "worker/nn/cpu_backend.h"
#include "worker/nn/im2col_conv.h"
#include "worker/nn/model.h"
#include "worker/nn/omp_threads.h"
#include "worker/nn/param_layers.h"

namespace {

using namespace pstrain::nn;

double median_ms(int reps, const std::function<void()>& fn) {
  fn();
  fn();
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

std::vector<float> filled(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = 0.01f * static_cast<float>(static_cast<int>(i % 201) - 100);
  return v;
}

// oneDNN convolution fwd + bwd-data (optional) + bwd-weights, one of:
//   kBlocked:       tag::any layouts, every tensor already in the primitives'
//                   layouts (the library's best case, no reorders);
//   kBlockedNchwIo: tag::any layouts, caller tensors NCHW/OIHW, reordered in
//                   and out around each primitive (what an NCHW caller pays);
//   kPlain:         the primitives run on NCHW/OIHW directly.
class LibraryConv {
 public:
  enum class Mode { kBlocked, kBlockedNchwIo, kPlain };

  LibraryConv(const Conv2dShape& s, Mode mode, bool need_dx)
      : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_), mode_(mode) {
    using tag = dnnl::memory::format_tag;
    const auto f32 = dnnl::memory::data_type::f32;
    const bool any = mode != Mode::kPlain;
    const dnnl::memory::dims xd{s.n, s.c_in, s.h, s.w}, wd{s.c_out, s.c_in, s.k_h, s.k_w};
    const dnnl::memory::dims yd{s.n, s.c_out, s.out_h(), s.out_w()};
    const dnnl::memory::desc x(xd, f32, any ? tag::any : tag::nchw), w(wd, f32, any ? tag::any : tag::oihw);
    const dnnl::memory::desc b({s.c_out}, f32, tag::x), y(yd, f32, any ? tag::any : tag::nchw);
    x_plain_ = dnnl::memory::desc(xd, f32, tag::nchw);
    w_plain_ = dnnl::memory::desc(wd, f32, tag::oihw);
    y_plain_ = dnnl::memory::desc(yd, f32, tag::nchw);
    const dnnl::memory::dims strides{s.stride, s.stride}, pad_l{s.pad, s.pad};
    const dnnl::memory::dims pad_r{(s.out_h() - 1) * s.stride + s.k_h - s.h - s.pad,
                                   (s.out_w() - 1) * s.stride + s.k_w - s.w - s.pad};
    const auto direct = dnnl::algorithm::convolution_direct;
    dnnl::convolution_forward::primitive_desc fwd_pd(
        {dnnl::prop_kind::forward_training, direct, x, w, b, y, strides, pad_l, pad_r}, engine_);
    Pass& fwd = passes_.emplace_back();
    fwd.primitive = dnnl::convolution_forward(fwd_pd);
    add_arg(fwd, DNNL_ARG_SRC, fwd_pd.src_desc(), x_plain_, true);
    add_arg(fwd, DNNL_ARG_WEIGHTS, fwd_pd.weights_desc(), w_plain_, true);
    add_arg(fwd, DNNL_ARG_BIAS, fwd_pd.bias_desc(), fwd_pd.bias_desc(), true);
    add_arg(fwd, DNNL_ARG_DST, fwd_pd.dst_desc(), y_plain_, false);
    if (need_dx) {
      dnnl::convolution_backward_data::primitive_desc pd({direct, x, w, y, strides, pad_l, pad_r}, engine_, fwd_pd);
      Pass& bwd = passes_.emplace_back();
      bwd.primitive = dnnl::convolution_backward_data(pd);
      add_arg(bwd, DNNL_ARG_DIFF_DST, pd.diff_dst_desc(), y_plain_, true);
      add_arg(bwd, DNNL_ARG_WEIGHTS, pd.weights_desc(), w_plain_, true);
      add_arg(bwd, DNNL_ARG_DIFF_SRC, pd.diff_src_desc(), x_plain_, false);
    }
    dnnl::convolution_backward_weights::primitive_desc pd({direct, x, w, b, y, strides, pad_l, pad_r}, engine_, fwd_pd);
    Pass& bww = passes_.emplace_back();
    bww.primitive = dnnl::convolution_backward_weights(pd);
    add_arg(bww, DNNL_ARG_SRC, pd.src_desc(), x_plain_, true);
    add_arg(bww, DNNL_ARG_DIFF_DST, pd.diff_dst_desc(), y_plain_, true);
    add_arg(bww, DNNL_ARG_DIFF_WEIGHTS, pd.diff_weights_desc(), w_plain_, false);
    add_arg(bww, DNNL_ARG_DIFF_BIAS, pd.diff_bias_desc(), pd.diff_bias_desc(), false);
  }

  void run() {
    for (Pass& pass : passes_) {
      for (auto& r : pass.before) r.prim.execute(stream_, r.from, r.to);
      pass.primitive.execute(stream_, pass.args);
      for (auto& r : pass.after) r.prim.execute(stream_, r.from, r.to);
    }
    stream_.wait();
  }

 private:
  struct Reorder { dnnl::reorder prim; dnnl::memory from, to; };
  struct Pass {
    dnnl::primitive primitive;
    std::unordered_map<int, dnnl::memory> args;
    std::vector<Reorder> before, after;
  };

  dnnl::memory make(const dnnl::memory::desc& md) {
    dnnl::memory m(md, engine_);
    const std::vector<float> values = filled(md.get_size() / sizeof(float));
    std::copy(values.begin(), values.end(), static_cast<float*>(m.get_data_handle()));
    return m;
  }

  // The primitive's memory; in kBlockedNchwIo mode also a plain caller
  // tensor and the reorder between them when the layouts differ.
  void add_arg(Pass& pass, int arg, const dnnl::memory::desc& wanted, const dnnl::memory::desc& plain, bool input) {
    dnnl::memory inner = make(wanted);
    pass.args[arg] = inner;
    if (mode_ != Mode::kBlockedNchwIo || wanted == plain) return;
    dnnl::memory user = make(plain);
    if (input) {
      pass.before.push_back({dnnl::reorder(user, inner), user, inner});
    } else {
      pass.after.push_back({dnnl::reorder(inner, user), inner, user});
    }
  }

  dnnl::engine engine_;
  dnnl::stream stream_;
  Mode mode_;
  dnnl::memory::desc x_plain_, w_plain_, y_plain_;
  std::vector<Pass> passes_;
};

struct SgemmResult { double square_gflops, im2col_gflops; };
struct StepResult { std::string model; int batch; double ms, images_per_s, gflops, pct_sgemm; };
struct ConvResult {
  std::string model, layer;
  int batch;
  double ours_ms, blocked_ms, blocked_io_ms, plain_ms, im2col_ms;
  double ratio;        // ours / best library path taking and returning NCHW tensors
  double ratio_compute;  // ours / blocked without reorders (the library's pure compute)
};

double sgemm_gflops(int m, int n, int k, int reps) {
  const auto a = filled(static_cast<std::size_t>(m) * k), b = filled(static_cast<std::size_t>(k) * n);
  std::vector<float> c(static_cast<std::size_t>(m) * n);
  const double ms = median_ms(reps, [&] { sgemm(false, false, m, n, k, a.data(), b.data(), c.data()); });
  return 2.0 * m * n * k / ms / 1e6;
}

StepResult bench_step(const std::string& name, int batch, int threads, int reps, double sgemm_rate) {
  CpuBackend backend(threads);
  Model model(model_spec(name, 1, 28, 28, 10), backend, batch);
  model.init_params(1);
  const auto images = filled(static_cast<std::size_t>(batch) * 784);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(batch));
  for (int i = 0; i < batch; ++i) labels[static_cast<std::size_t>(i)] = i % 10;
  const double ms = median_ms(reps, [&] { model.train_step(images.data(), labels.data(), batch); });
  const double gflops = model.train_flops(batch) / ms / 1e6;
  return {name, batch, ms, batch * 1e3 / ms, gflops, 100.0 * gflops / sgemm_rate};
}

std::vector<ConvResult> bench_convs(const std::string& name, int batch, int threads, int reps) {
  CpuBackend backend(threads);
  const OmpThreads omp(threads);
  Model model(model_spec(name, 1, 28, 28, 10), backend, batch);
  std::vector<ConvResult> out;
  bool first = true;
  for (const auto& layer : model.layers()) {
    const auto* conv = dynamic_cast<const Conv2d*>(layer.get());
    if (conv == nullptr) continue;
    const Conv2dShape s = conv->shape(batch);
    const bool need_dx = !first;
    first = false;
    const auto x = filled(static_cast<std::size_t>(s.n) * s.c_in * s.h * s.w);
    const auto w = filled(static_cast<std::size_t>(s.c_out) * s.c_in * s.k_h * s.k_w);
    const auto b = filled(static_cast<std::size_t>(s.c_out));
    const auto dy = filled(static_cast<std::size_t>(s.n) * s.c_out * s.out_h() * s.out_w());
    std::vector<float> y(dy.size()), dx(x.size()), dw(w.size()), db(b.size());
    const double ours = median_ms(reps, [&] {
      backend.conv2d_forward(s, x.data(), w.data(), b.data(), y.data());
      backend.conv2d_backward(s, x.data(), w.data(), dy.data(), need_dx ? dx.data() : nullptr, dw.data(), db.data());
    });
    omp.apply();
    LibraryConv blocked(s, LibraryConv::Mode::kBlocked, need_dx);
    LibraryConv blocked_io(s, LibraryConv::Mode::kBlockedNchwIo, need_dx);
    LibraryConv plain(s, LibraryConv::Mode::kPlain, need_dx);
    const double blocked_ms = median_ms(reps, [&] { blocked.run(); });
    const double blocked_io_ms = median_ms(reps, [&] { blocked_io.run(); });
    const double plain_ms = median_ms(reps, [&] { plain.run(); });
    Im2colConv im2col(s);
    const double im2col_ms = median_ms(reps, [&] {
      im2col.forward(x.data(), w.data(), b.data(), y.data());
      im2col.backward(x.data(), w.data(), dy.data(), need_dx ? dx.data() : nullptr, dw.data(), db.data());
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let OpenBLAS's threads go idle
    const double best_nchw = std::min({blocked_io_ms, plain_ms, im2col_ms});
    out.push_back({name, conv->name(), batch, ours, blocked_ms, blocked_io_ms, plain_ms, im2col_ms, ours / best_nchw,
                   ours / blocked_ms});
  }
  return out;
}

struct LayerTime { std::string model, layer; double forward_ms, backward_ms; };

// Each layer's forward and backward alone at one batch size, on its own
// buffers (dx skipped for the first layer, as in a training step).
std::vector<LayerTime> bench_layers(const std::string& name, int batch, int threads, int reps) {
  CpuBackend backend(threads);
  Model model(model_spec(name, 1, 28, 28, 10), backend, batch);
  model.init_params(1);
  std::vector<LayerTime> out;
  bool first = true;
  for (const auto& layer : model.layers()) {
    const auto in = filled(static_cast<std::size_t>(batch * layer->input_dims().num_elems()));
    const auto dy = filled(static_cast<std::size_t>(batch * layer->output_dims().num_elems()));
    std::vector<float> y(dy.size()), dx(in.size());
    const ForwardContext ctx{batch, true, 7};
    const double fwd = median_ms(reps, [&] { layer->forward(ctx, in.data(), y.data()); });
    const double bwd = median_ms(reps, [&] {
      layer->backward(batch, in.data(), y.data(), dy.data(), first ? nullptr : dx.data());
    });
    first = false;
    out.push_back({name, layer->name(), fwd, bwd});
  }
  return out;
}

void write_json(const std::string& path, int threads, const SgemmResult& sgemm_result,
                const std::vector<StepResult>& steps, const std::vector<ConvResult>& convs,
                const std::vector<LayerTime>& layers, int layers_batch) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) throw pstrain::Error("cannot write " + path);
  std::fprintf(f, "{\n  \"threads\": %d,\n  \"sgemm_gflops\": {\"2048x2048x2048\": %.2f, \"im2col_64x12544x800\": %.2f},\n",
               threads, sgemm_result.square_gflops, sgemm_result.im2col_gflops);
  std::fprintf(f, "  \"steps\": [\n");
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const auto& r = steps[i];
    std::fprintf(f, "    {\"model\": \"%s\", \"batch\": %d, \"ms_per_step\": %.3f, \"images_per_s\": %.1f, "
                 "\"gflops\": %.2f, \"pct_of_sgemm\": %.1f}%s\n", r.model.c_str(), r.batch, r.ms, r.images_per_s,
                 r.gflops, r.pct_sgemm, i + 1 < steps.size() ? "," : "");
  }
  std::fprintf(f, "  ],\n  \"convs\": [\n");
  for (std::size_t i = 0; i < convs.size(); ++i) {
    const auto& r = convs[i];
    std::fprintf(f, "    {\"model\": \"%s\", \"layer\": \"%s\", \"batch\": %d, \"ours_ms\": %.3f, "
                 "\"onednn_blocked_ms\": %.3f, \"onednn_blocked_nchw_io_ms\": %.3f, \"onednn_nchw_ms\": %.3f, "
                 "\"im2col_sgemm_ms\": %.3f, \"ratio_to_best_nchw\": %.3f, \"ratio_to_blocked_compute\": %.3f}%s\n",
                 r.model.c_str(), r.layer.c_str(), r.batch, r.ours_ms, r.blocked_ms, r.blocked_io_ms, r.plain_ms,
                 r.im2col_ms, r.ratio, r.ratio_compute, i + 1 < convs.size() ? "," : "");
  }
  std::fprintf(f, "  ],\n  \"layers_batch\": %d,\n  \"layers\": [\n", layers_batch);
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto& r = layers[i];
    std::fprintf(f, "    {\"model\": \"%s\", \"layer\": \"%s\", \"forward_ms\": %.3f, \"backward_ms\": %.3f}%s\n",
                 r.model.c_str(), r.layer.c_str(), r.forward_ms, r.backward_ms, i + 1 < layers.size() ? "," : "");
  }
  std::fprintf(f, "  ]\n}\n");
  std::fclose(f);
}

int run(int threads, int reps, const std::vector<std::string>& models, const std::vector<int>& batches,
        const std::string& json_path) {
  threads = OmpThreads(threads).count();
  set_blas_threads(threads);
  const SgemmResult sgemm_result{sgemm_gflops(2048, 2048, 2048, 3), sgemm_gflops(64, 12544, 800, reps)};
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::printf("SGEMM (OpenBLAS, %d threads): 2048x2048x2048 %.1f GFLOP/s; im2col shape 64x12544x800 "
              "(fmnist conv2, batch 64) %.1f GFLOP/s\n\n", threads, sgemm_result.square_gflops, sgemm_result.im2col_gflops);

  std::vector<StepResult> steps;
  std::printf("%-11s %6s %9s %9s %8s %11s\n", "model", "batch", "ms/step", "images/s", "GFLOP/s", "% of SGEMM");
  for (const auto& model : models)
    for (int batch : batches) {
      steps.push_back(bench_step(model, batch, threads, reps, sgemm_result.square_gflops));
      const auto& r = steps.back();
      std::printf("%-11s %6d %9.2f %9.0f %8.1f %10.1f%%\n", r.model.c_str(), r.batch, r.ms, r.images_per_s, r.gflops,
                  r.pct_sgemm);
      std::fflush(stdout);
    }

  std::vector<ConvResult> convs;
  std::printf("\nconvolutions, forward + backward, ms. blk: oneDNN blocked layouts, tensors already blocked;\n"
              "blk+io: same with NCHW tensors reordered in/out; nchw: oneDNN on NCHW; im2col: im2col + SGEMM.\n"
              "ratio = ours / best of blk+io, nchw, im2col (same NCHW contract); compute = ours / blk\n");
  std::printf("%-11s %-6s %6s %8s %8s %8s %8s %8s %6s %8s\n", "model", "layer", "batch", "ours", "blk", "blk+io",
              "nchw", "im2col", "ratio", "compute");
  for (const auto& model : models)
    for (int batch : batches)
      for (const auto& r : bench_convs(model, batch, threads, reps)) {
        convs.push_back(r);
        std::printf("%-11s %-6s %6d %8.3f %8.3f %8.3f %8.3f %8.3f %6.2f %8.2f\n", r.model.c_str(), r.layer.c_str(),
                    r.batch, r.ours_ms, r.blocked_ms, r.blocked_io_ms, r.plain_ms, r.im2col_ms, r.ratio, r.ratio_compute);
        std::fflush(stdout);
      }
  const int layers_batch = batches.front();
  std::vector<LayerTime> layers;
  std::printf("\nper layer at batch %d, ms\n%-11s %-9s %8s %8s\n", layers_batch, "model", "layer", "forward", "backward");
  for (const auto& model : models)
    for (const auto& r : bench_layers(model, layers_batch, threads, reps)) {
      layers.push_back(r);
      std::printf("%-11s %-9s %8.3f %8.3f\n", r.model.c_str(), r.layer.c_str(), r.forward_ms, r.backward_ms);
    }
  if (!json_path.empty()) write_json(json_path, threads, sgemm_result, steps, convs, layers, layers_batch);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_train_step: CPU training-step and convolution benchmark"};
  int threads = 0, reps = 10;
  std::vector<std::string> models{"fmnist_cnn", "small_cnn"};
  std::vector<int> batches{32, 64, 128, 256};
  std::string json_path;
  app.add_option("--threads", threads, "CPU threads (0 = all cores)")->check(CLI::NonNegativeNumber);
  app.add_option("--reps", reps, "timed runs per measurement (median reported)")->check(CLI::PositiveNumber);
  app.add_option("--models", models, "models to run")->delimiter(',');
  app.add_option("--batches", batches, "batch sizes")->delimiter(',')->check(CLI::PositiveNumber);
  app.add_option("--json", json_path, "also write the results to this JSON file");
  std::string device = "cpu";
  pstrain::bench::CudaStepOptions cuda;
  app.add_option("--device", device, "cpu (the CPU backend against oneDNN) or cuda (the GPU step against PyTorch)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--precision", cuda.precision, "cuda: fp32 or tf32 (workload.precision)")
      ->check(CLI::IsMember({"fp32", "tf32"}));
  app.add_option("--torch", cuda.torch_script, "cuda: the PyTorch step script (tools/torch_step_bench.py)");
  app.add_option("--python", cuda.python, "cuda: the python3 that has torch");
  CLI11_PARSE(app, argc, argv);
  if (device == "cuda") {
    if (app.count("--batches") > 0) cuda.batches = batches;
    if (app.count("--reps") > 0) cuda.reps = reps;
    cuda.model = models.size() == 1 ? models.front() : "fmnist_cnn";
    cuda.json_path = json_path;
    return pstrain::guarded_main("bench_train_step", [&] { return pstrain::bench::run_cuda_step_bench(cuda); });
  }
  return pstrain::guarded_main("bench_train_step", [&] { return run(threads, reps, models, batches, json_path); });
}
