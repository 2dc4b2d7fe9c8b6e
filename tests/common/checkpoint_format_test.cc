// Checkpoints on disk (common/checkpoint/checkpoint.h): parts and manifests written and
// read back; truncated, corrupt and unfinished checkpoints detected and the
// previous complete one used, with the reason; pruning; the fingerprint check.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/checkpoint/checkpoint.h"
#include "common/config/config.h"
#include "tests/support/temp_dir.h"

namespace pstrain {
namespace {

namespace fs = std::filesystem;

using pstrain::test::TempDir;

RunConfig tiny_config(const fs::path& run_dir) {
  RunConfig c;
  c.output.run_dir = run_dir.string();
  c.workload.model = "small_cnn";
  return c;
}

CheckpointPart sample_part(std::int64_t step) {
  CheckpointPart p;
  p.put_i64("step", step);
  p.put_f32s("weights", std::vector<float>{1.5f, -2.25f, 3.0f});
  p.put_i64s("clocks", {4, 5});
  p.put_f64("time_s", 12.5);
  p.put_bytes("note", "hello");
  return p;
}

// A complete checkpoint at `step` with parts server-0 and worker-0.
fs::path make_checkpoint(const RunConfig& config, std::int64_t step) {
  const fs::path dir = checkpoint_root(config) / checkpoint_dir_name(step);
  write_checkpoint_part(dir, "server-0.ckpt", sample_part(step));
  write_checkpoint_part(dir, "worker-0.ckpt", sample_part(step));
  write_checkpoint_manifest(dir, step, checkpoint_fingerprint(config, 3), {"server-0.ckpt", "worker-0.ckpt"});
  return dir;
}

void flip_byte(const fs::path& file, std::size_t at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(at));
  f.put(static_cast<char>(c ^ 0x40));
}

}  // namespace

TEST_CASE("a part round-trips every kind of field") {
  const CheckpointPart p = CheckpointPart::decode(sample_part(7).encode(), "test");
  CHECK(p.i64("step") == 7);
  CHECK(p.f32s("weights") == std::vector<float>{1.5f, -2.25f, 3.0f});
  CHECK(p.i64s("clocks") == std::vector<std::int64_t>{4, 5});
  CHECK(p.f64("time_s") == 12.5);
  CHECK(p.bytes("note") == "hello");
  CHECK_THROWS_WITH_AS(p.i64("absent"), doctest::Contains("no field 'absent'"), CheckpointError);
}

TEST_CASE("a truncated or byte-flipped part fails its own check") {
  const std::string good = sample_part(3).encode();
  CHECK_THROWS_WITH_AS(CheckpointPart::decode(good.substr(0, good.size() - 9), "p"), doctest::Contains("checksum"),
                       CheckpointError);
  CHECK_THROWS_WITH_AS(CheckpointPart::decode(good.substr(0, 10), "p"), doctest::Contains("truncated"), CheckpointError);
  std::string flipped = good;
  flipped[20] = static_cast<char>(flipped[20] ^ 1);
  CHECK_THROWS_WITH_AS(CheckpointPart::decode(flipped, "p"), doctest::Contains("checksum"), CheckpointError);
  CHECK_THROWS_WITH_AS(CheckpointPart::decode("XXXX" + good.substr(4), "p"), doctest::Contains("bad magic"),
                       CheckpointError);
}

TEST_CASE("a complete checkpoint is found, its parts read back through the manifest") {
  TempDir tmp;
  const RunConfig config = tiny_config(tmp.path());
  const fs::path dir = make_checkpoint(config, 10);
  CHECK(checkpoint_problem(dir).empty());
  const CheckpointManifest m = read_checkpoint_manifest(dir);
  CHECK(m.step == 10);
  REQUIRE(m.parts.size() == 2);
  CHECK(m.parts[0].name == "server-0.ckpt");
  CHECK(m.parts[0].bytes == static_cast<std::int64_t>(fs::file_size(dir / "server-0.ckpt")));
  CHECK(m.fingerprint == checkpoint_fingerprint(config, 3));
  CHECK(read_checkpoint_part(dir, "worker-0.ckpt").i64("step") == 10);
  const auto found = find_newest_checkpoint(checkpoint_root(config));
  REQUIRE(found);
  CHECK(found->dir == dir);
  CHECK(parse_manifest_json(manifest_json(m), "again").parts.size() == 2);
  // No temporary files are left behind.
  for (const auto& e : fs::directory_iterator(dir)) CHECK(e.path().string().find(".tmp-") == std::string::npos);
}

TEST_CASE("newest checkpoint unusable: the previous complete one is used and the reason given") {
  TempDir tmp;
  const RunConfig config = tiny_config(tmp.path());
  const fs::path root = checkpoint_root(config);
  make_checkpoint(config, 10);
  std::vector<std::string> skipped;

  SUBCASE("missing manifest (not completed)") {
    const fs::path dir = make_checkpoint(config, 20);
    fs::remove(dir / "manifest.json");
    const auto found = find_newest_checkpoint(root, &skipped);
    REQUIRE(found);
    CHECK(found->manifest.step == 10);
    REQUIRE(skipped.size() == 1);
    CHECK(skipped[0] == "step-00000020: step-00000020: no manifest.json (the checkpoint was not completed)");
  }
  SUBCASE("truncated part") {
    const fs::path dir = make_checkpoint(config, 20);
    fs::resize_file(dir / "server-0.ckpt", fs::file_size(dir / "server-0.ckpt") - 5);
    const auto found = find_newest_checkpoint(root, &skipped);
    REQUIRE(found);
    CHECK(found->manifest.step == 10);
    REQUIRE(skipped.size() == 1);
    CHECK(doctest::String(skipped[0].c_str()) == doctest::Contains("server-0.ckpt is"));
    CHECK(doctest::String(skipped[0].c_str()) == doctest::Contains("(truncated)"));
  }
  SUBCASE("flipped byte in a part") {
    const fs::path dir = make_checkpoint(config, 20);
    flip_byte(dir / "worker-0.ckpt", 30);
    const auto found = find_newest_checkpoint(root, &skipped);
    REQUIRE(found);
    CHECK(found->manifest.step == 10);
    REQUIRE(skipped.size() == 1);
    CHECK(doctest::String(skipped[0].c_str()) == doctest::Contains("worker-0.ckpt fails its CRC-32 check"));
  }
  SUBCASE("missing part") {
    const fs::path dir = make_checkpoint(config, 20);
    fs::remove(dir / "server-0.ckpt");
    const auto found = find_newest_checkpoint(root, &skipped);
    REQUIRE(found);
    CHECK(found->manifest.step == 10);
    REQUIRE(skipped.size() == 1);
    CHECK(doctest::String(skipped[0].c_str()) == doctest::Contains("server-0.ckpt is missing"));
  }
  SUBCASE("corrupt manifest") {
    const fs::path dir = make_checkpoint(config, 20);
    std::ofstream(dir / "manifest.json") << "{\"format\":1,\"step\":";
    const auto found = find_newest_checkpoint(root, &skipped);
    REQUIRE(found);
    CHECK(found->manifest.step == 10);
    REQUIRE(skipped.size() == 1);
    CHECK(doctest::String(skipped[0].c_str()) == doctest::Contains("not a valid manifest"));
  }
  // A part read through the manifest of the unusable checkpoint is refused too.
  CHECK(resolve_resume(tmp.path(), config).manifest.step == 10);
}

TEST_CASE("no complete checkpoint: resume says what it looked at") {
  TempDir tmp;
  const RunConfig config = tiny_config(tmp.path());
  CHECK_THROWS_WITH_AS(resolve_resume(tmp.path(), config), doctest::Contains("no step-* directory found"),
                       CheckpointError);
  const fs::path dir = make_checkpoint(config, 5);
  fs::remove(dir / "manifest.json");
  CHECK_THROWS_WITH_AS(resolve_resume(tmp.path(), config), doctest::Contains("no complete checkpoint in"),
                       CheckpointError);
  CHECK_THROWS_WITH_AS(resolve_resume(dir, config), doctest::Contains("no manifest.json"), CheckpointError);
}

TEST_CASE("pruning keeps the newest `keep` complete checkpoints and anything newer") {
  TempDir tmp;
  const RunConfig config = tiny_config(tmp.path());
  const fs::path root = checkpoint_root(config);
  for (const std::int64_t step : {5, 10, 15, 20}) make_checkpoint(config, step);
  const fs::path unfinished = root / checkpoint_dir_name(25);
  write_checkpoint_part(unfinished, "server-0.ckpt", sample_part(25));  // being written
  const auto removed = prune_checkpoints(root, 2);
  CHECK(removed.size() == 2);
  CHECK(fs::exists(root / "step-00000020"));
  CHECK(fs::exists(root / "step-00000015"));
  CHECK_FALSE(fs::exists(root / "step-00000010"));
  CHECK_FALSE(fs::exists(root / "step-00000005"));
  CHECK(fs::exists(unfinished));
}

TEST_CASE("resume removes the checkpoints newer than the one it starts from") {
  TempDir tmp;
  const RunConfig config = tiny_config(tmp.path());
  const fs::path root = checkpoint_root(config);
  for (const std::int64_t step : {4, 8, 12}) make_checkpoint(config, step);
  const auto removed = remove_checkpoints_after(root, 4);
  CHECK(removed.size() == 2);
  CHECK(fs::exists(root / "step-00000004"));
  CHECK_FALSE(fs::exists(root / "step-00000008"));
  CHECK_FALSE(fs::exists(root / "step-00000012"));
}

TEST_CASE("the fingerprint names every difference") {
  RunConfig a;
  RunConfig b = a;
  CHECK(fingerprint_mismatch(checkpoint_fingerprint(a, 100), checkpoint_fingerprint(b, 100)).empty());
  CHECK(fingerprint_mismatch(checkpoint_fingerprint(a, 100), checkpoint_fingerprint(b)).empty());  // layout unknown
  b.mode = Mode::kAsync;
  b.workload.model = "small_cnn";
  const std::string diff = fingerprint_mismatch(checkpoint_fingerprint(a, 100), checkpoint_fingerprint(b, 100));
  CHECK(diff == "mode: the checkpoint has \"sync\", the config \"async\"; workload.model: the checkpoint has "
                "\"fmnist_cnn\", the config \"small_cnn\"");
  RunConfig c = a;
  c.cluster.num_workers = 3;
  CHECK(fingerprint_mismatch(checkpoint_fingerprint(a, 100), checkpoint_fingerprint(c, 100)) ==
        "cluster.workers: the checkpoint has \"2\", the config \"3\"");
  CHECK(fingerprint_mismatch(checkpoint_fingerprint(a, 100), checkpoint_fingerprint(a, 101)) ==
        "parameters: the checkpoint has \"100\", the config \"101\"");
}

TEST_CASE("[checkpoint] keys: defaults, parsing, validation with file and line") {
  const RunConfig d;
  CHECK(d.checkpoint.interval_steps == 0);
  CHECK(d.checkpoint.keep == 2);
  CHECK(d.checkpoint.dir.empty());
  const RunConfig c = parse_config("[checkpoint]\ninterval_steps = 50\nkeep = 3\ndir = \"/tmp/ck\"\n", "t.toml");
  CHECK(c.checkpoint.interval_steps == 50);
  CHECK(c.checkpoint.keep == 3);
  CHECK(checkpoint_root(c) == fs::path("/tmp/ck"));
  CHECK(checkpoint_root(tiny_config("/r")) == fs::path("/r/checkpoints"));
  CHECK_THROWS_WITH_AS(parse_config("[checkpoint]\nkeep = 0\n", "t.toml"), doctest::Contains("t.toml:2"), ConfigError);
  CHECK_THROWS_WITH_AS(parse_config("[checkpoint]\ninterval_steps = -1\n", "t.toml"),
                       doctest::Contains("key 'checkpoint.interval_steps'"), ConfigError);
  CHECK(to_toml(c).find("[checkpoint]") != std::string::npos);
}

}  // namespace pstrain
