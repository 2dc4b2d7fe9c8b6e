// A checkpoint's parts are bound to it (common/checkpoint/checkpoint.h): the
// manifest records each part's body CRC-32 (not the whole file's, which is
// the same constant for every intact part), and each part names its node and
// step. A part swapped in from another checkpoint, renamed from another node
// or copied from another job is refused with its reason, and the search for a
// checkpoint to resume falls back to the previous complete one.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "common/checkpoint/checkpoint.h"
#include "common/config/config.h"
#include "tests/support/temp_dir.h"

namespace pstrain {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

RunConfig config_in(const fs::path& run_dir) {
  RunConfig c;
  c.output.run_dir = run_dir.string();
  c.workload.model = "small_cnn";
  return c;
}

CheckpointPart part_at(std::int64_t step, float weight) {
  CheckpointPart p;
  p.put_i64("step", step);
  p.put_f32s("weights", std::vector<float>{weight, -weight, 0.5f});
  return p;
}

fs::path checkpoint_at(const RunConfig& config, std::int64_t step, float weight) {
  const fs::path dir = checkpoint_root(config) / checkpoint_dir_name(step);
  write_checkpoint_part(dir, "server-0.ckpt", part_at(step, weight));
  write_checkpoint_part(dir, "server-1.ckpt", part_at(step, weight + 1));
  write_checkpoint_part(dir, "worker-0.ckpt", part_at(step, weight + 2));
  write_checkpoint_manifest(dir, step, checkpoint_fingerprint(config, 3),
                            {"server-0.ckpt", "server-1.ckpt", "worker-0.ckpt"});
  return dir;
}

std::string skipped_reason(const fs::path& root, std::int64_t expect_step) {
  std::vector<std::string> skipped;
  const auto found = find_newest_checkpoint(root, &skipped);
  REQUIRE(found);
  CHECK(found->manifest.step == expect_step);
  REQUIRE(skipped.size() == 1);
  return skipped[0];
}

TEST_CASE("the manifest's CRCs tell the parts apart: they are not the CRC-32 residue") {
  TempDir tmp("ckptid");
  const RunConfig config = config_in(tmp.path());
  const fs::path dir = checkpoint_at(config, 10, 1.0f);
  const CheckpointManifest m = read_checkpoint_manifest(dir);
  CHECK(m.format == 2);
  std::set<std::uint32_t> crcs;
  for (const CheckpointPartInfo& p : m.parts) crcs.insert(p.crc32);
  CHECK(crcs.size() == 3);
  CHECK(crcs.count(0x2144DF1Cu) == 0);
  const std::string data = read_file_bytes(dir / "server-1.ckpt");
  CHECK(m.parts[1].crc32 == part_body_crc32(data));
  CHECK(crc32_of(data) == 0x2144DF1Cu);  // the whole file's CRC is the residue: it says nothing
}

TEST_CASE("each part names its node and step, read back without decoding its tensors") {
  TempDir tmp("ckptid");
  const RunConfig config = config_in(tmp.path());
  const fs::path dir = checkpoint_at(config, 40, 2.0f);
  const PartIdentity id = CheckpointPart::identity_of(read_file_bytes(dir / "server-1.ckpt"), "test");
  CHECK(id.node == "server-1.ckpt");
  CHECK(id.step == 40);
  const CheckpointPart back = read_checkpoint_part(dir, "server-1.ckpt");
  CHECK(back.i64("checkpoint.step") == 40);
  CHECK(back.bytes("checkpoint.node") == "server-1.ckpt");
  CHECK(back.f32s("weights")[0] == 3.0f);
  // A part encoded without an identity carries none.
  const PartIdentity none = CheckpointPart::identity_of(part_at(1, 1.0f).encode(), "test");
  CHECK(none.node.empty());
  CHECK(none.step == -1);
}

TEST_CASE("a part that does not belong is refused and the previous complete checkpoint is used") {
  TempDir tmp("ckptid");
  const RunConfig config = config_in(tmp.path());
  const fs::path root = checkpoint_root(config);
  const fs::path older = checkpoint_at(config, 10, 1.0f);
  const fs::path newer = checkpoint_at(config, 20, 5.0f);

  SUBCASE("a part of the same node from another checkpoint (the size is the same)") {
    fs::copy_file(older / "server-0.ckpt", newer / "server-0.ckpt", fs::copy_options::overwrite_existing);
    const std::string why = skipped_reason(root, 10);
    CHECK(doctest::String(why.c_str()) == doctest::Contains("part server-0.ckpt fails its CRC-32 check"));
    CHECK_THROWS_WITH_AS(read_checkpoint_part(newer, "server-0.ckpt"), doctest::Contains("fails its CRC-32 check"),
                         CheckpointError);
  }
  SUBCASE("two nodes' parts swapped") {
    fs::rename(newer / "server-0.ckpt", tmp.path() / "s0");
    fs::rename(newer / "server-1.ckpt", newer / "server-0.ckpt");
    fs::rename(tmp.path() / "s0", newer / "server-1.ckpt");
    CHECK(doctest::String(skipped_reason(root, 10).c_str()) == doctest::Contains("fails its CRC-32 check"));
  }
  SUBCASE("a whole step directory renamed: its parts and manifest name another step") {
    fs::remove_all(newer);
    fs::copy(older, root / checkpoint_dir_name(30));
    CHECK(doctest::String(skipped_reason(root, 10).c_str()) ==
          doctest::Contains("the manifest is step 10's, not step-00000030's"));
  }
  SUBCASE("a manifest rewritten over a part of another step (its CRC then agrees): the part's step says no") {
    fs::copy_file(older / "worker-0.ckpt", newer / "worker-0.ckpt", fs::copy_options::overwrite_existing);
    write_checkpoint_manifest(newer, 20, checkpoint_fingerprint(config, 3),
                              {"server-0.ckpt", "server-1.ckpt", "worker-0.ckpt"});
    CHECK(doctest::String(skipped_reason(root, 10).c_str()) ==
          doctest::Contains("part worker-0.ckpt belongs to step 10, not to step-00000020"));
  }
  SUBCASE("a manifest rewritten over another node's part: the part's node says no") {
    fs::copy_file(newer / "server-1.ckpt", newer / "server-0.ckpt", fs::copy_options::overwrite_existing);
    write_checkpoint_manifest(newer, 20, checkpoint_fingerprint(config, 3),
                              {"server-0.ckpt", "server-1.ckpt", "worker-0.ckpt"});
    CHECK(doctest::String(skipped_reason(root, 10).c_str()) ==
          doctest::Contains("part server-0.ckpt is server-1.ckpt's part, not server-0.ckpt"));
  }
  CHECK(resolve_resume(tmp.path(), config).manifest.step == 10);
}

TEST_CASE("a format-1 manifest of an older build is still read, with its whole-file CRCs") {
  TempDir tmp("ckptid");
  const RunConfig config = config_in(tmp.path());
  const fs::path dir = checkpoint_root(config) / checkpoint_dir_name(8);
  write_checkpoint_part(dir, "server-0.ckpt", part_at(8, 1.0f));
  const std::string data = read_file_bytes(dir / "server-0.ckpt");
  std::ofstream(dir / "manifest.json") << "{\"format\":1,\"step\":8,\"fingerprint\":{},\"parts\":[{\"name\":\"server-0.ckpt\","
                                       << "\"bytes\":" << data.size() << ",\"crc32\":" << crc32_of(data) << "}]}\n";
  CHECK(checkpoint_problem(dir).empty());
  CHECK(read_checkpoint_part(dir, "server-0.ckpt").i64("step") == 8);
  CHECK(read_checkpoint_manifest(dir).format == 1);
  std::ofstream(dir / "manifest.json") << "{\"format\":3,\"step\":8,\"fingerprint\":{},\"parts\":[]}\n";
  CHECK(doctest::String(checkpoint_problem(dir).c_str()) == doctest::Contains("manifest format 3, this build reads 1 and 2"));
}

}  // namespace
}  // namespace pstrain
