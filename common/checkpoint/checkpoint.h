// Checkpoints on disk (config [checkpoint]; design in docs/architecture.md,
// "Checkpoints and resume"). Pure file logic, no sockets: the nodes decide
// what goes into their parts and when.
//
// A checkpoint is a directory ROOT/step-NNNNNNNN/ (N = steps completed by
// every worker) holding one part per node (server-R.ckpt, worker-R.ckpt) and
// manifest.json, written last: the checkpoint is complete exactly when its
// manifest exists and every part it lists has the listed size and CRC-32, and
// says it is that node's part of that step (below).
// Every file is written atomically (temporary file, fsync, rename, fsync of
// the directory), so a crash leaves either the old state or the new file.
//
// Part format (little-endian): "PSCK", u32 format version (1), u32 number of
// fields, then per field: u32 name length, name, u32 kind (1 = i64s,
// 2 = f32s, 3 = bytes), u64 element count, the elements; then a trailer: u32
// CRC-32 (zlib) of everything before it. A part therefore checks itself
// (truncation, flipped bytes) even without the manifest. write_checkpoint_part
// adds the part's identity, the fields "checkpoint.node" (bytes: its file
// name) and "checkpoint.step" (the step of its directory).
//
// manifest.json: {"format":2,"step":N,"fingerprint":{"mode":"sync",...},
// "members":[0,1,3],"slots":4,  (the workers training at the checkpoint,
// common/checkpoint/checkpoint_members.h; absent in older ones, and in
// allreduce ones of builds before issue 29's resume)
// "parts":[{"name":"server-0.ckpt","bytes":B,"crc32":C},...]}. C is the CRC-32
// of the part's body (everything before its trailer), so it names the part's
// content: a part that checks itself but is not the one the manifest was
// written over (copied from another checkpoint or job) is refused, and so is a
// part whose identity names another node or step. Format 1 manifests (older
// builds) recorded the CRC-32 of the whole file, which is the same constant for
// every intact part; they are still read, with that weaker check.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/config/config.h"
#include "common/base/errors.h"

namespace pstrain {

// A checkpoint that cannot be used (missing, truncated, corrupt, mismatched).
class CheckpointError : public Error {
 public:
  using Error::Error;
};

// Which node's part of which checkpoint a part is (step -1 and an empty node:
// a part written without one, by an older build or outside a step directory).
struct PartIdentity {
  std::string node;
  std::int64_t step = -1;
};

// The fields of one part, by name.
class CheckpointPart {
 public:
  void put_i64s(const std::string& name, std::vector<std::int64_t> values);
  void put_i64(const std::string& name, std::int64_t value) { put_i64s(name, {value}); }
  void put_f64(const std::string& name, double value);
  void put_f32s(const std::string& name, std::span<const float> values);
  void put_bytes(const std::string& name, const std::string& bytes);

  bool has(const std::string& name) const;
  // CheckpointError naming the part and field when absent or of another kind.
  const std::vector<std::int64_t>& i64s(const std::string& name) const;
  std::int64_t i64(const std::string& name) const;
  double f64(const std::string& name) const;
  const std::vector<float>& f32s(const std::string& name) const;
  const std::string& bytes(const std::string& name) const;

  // `identity` (may be null) is written as its two fields.
  std::string encode(const PartIdentity* identity = nullptr) const;
  // The identity an encoded part carries, read without decoding its tensors.
  static PartIdentity identity_of(const std::string& data, const std::string& what);
  // `what` names the source in errors ("server-0.ckpt of step-00000010").
  static CheckpointPart decode(const std::string& data, const std::string& what);

  std::string what = "part";  // for messages

 private:
  std::map<std::string, std::vector<std::int64_t>> i64s_;
  std::map<std::string, std::vector<float>> f32s_;
  std::map<std::string, std::string> bytes_;
};

// What a checkpoint must agree with to be resumed: the fields of the config
// that change the model, the shard map or the meaning of the saved state.
struct CheckpointFingerprint {
  std::vector<std::pair<std::string, std::string>> fields;  // key -> value, in a fixed order
  bool operator==(const CheckpointFingerprint&) const = default;
};

// From a config; num_params < 0 leaves the layout out (the launcher, which
// builds no model, checks the rest).
CheckpointFingerprint checkpoint_fingerprint(const RunConfig& config, std::int64_t num_params = -1);
// Empty when `config` (possibly without the layout) agrees with `saved`;
// else one line per difference: "workload.model: the checkpoint has
// \"small_cnn\", the config \"fmnist_cnn\"".
std::string fingerprint_mismatch(const CheckpointFingerprint& saved, const CheckpointFingerprint& config);

struct CheckpointPartInfo {
  std::string name;
  std::int64_t bytes = 0;
  std::uint32_t crc32 = 0;
};

struct CheckpointManifest {
  std::int64_t format = 2;  // 1: crc32 over whole part files (older builds)
  std::int64_t step = 0;
  CheckpointFingerprint fingerprint;
  std::vector<CheckpointPartInfo> parts;
  // Elastic membership: the workers live at the checkpoint (ranks ascending)
  // and the job's worker slots then ("members":[0,1,3],"slots":4). Empty and 0
  // in a manifest written without them (older builds, allreduce, a server's
  // initial part): read as workers 0..cluster.workers-1 (resume_members,
  // common/checkpoint/checkpoint_members.h).
  std::vector<int> members;
  std::int64_t slots = 0;
};

std::uint32_t crc32_of(std::string_view data);
// What a format-2 manifest records for an encoded part: the CRC-32 of its body.
std::uint32_t part_body_crc32(const std::string& data);
// "step-00000120".
std::string checkpoint_dir_name(std::int64_t step);
// The checkpoint root of a run: checkpoint.dir, else RUN_DIR/checkpoints.
std::filesystem::path checkpoint_root(const RunConfig& config);

// Writes `data` to `path` atomically: PATH.tmp-PID, fsync, rename, fsync of
// the directory. Throws Error naming the file.
void write_file_atomic(const std::filesystem::path& path, const std::string& data);
std::string read_file_bytes(const std::filesystem::path& path);  // CheckpointError when unreadable

// Writes part `name` of checkpoint `dir` (created if needed).
void write_checkpoint_part(const std::filesystem::path& dir, const std::string& name, const CheckpointPart& part);
// Reads and checks part `name` against the manifest of `dir`.
CheckpointPart read_checkpoint_part(const std::filesystem::path& dir, const std::string& name);

// Makes `dir` complete: reads every part in `part_names` (size, CRC), writes
// manifest.json last (with `members` and `slots` when members is not empty).
// CheckpointError when a part is missing or corrupt.
CheckpointManifest write_checkpoint_manifest(const std::filesystem::path& dir, std::int64_t step,
                                             const CheckpointFingerprint& fingerprint,
                                             const std::vector<std::string>& part_names,
                                             const std::vector<int>& members = {}, std::int64_t slots = 0);
CheckpointManifest read_checkpoint_manifest(const std::filesystem::path& dir);
std::string manifest_json(const CheckpointManifest& manifest);
CheckpointManifest parse_manifest_json(const std::string& text, const std::string& what);

// Empty when `dir` is a complete checkpoint (manifest readable, every part
// present with its size, CRC and self-check); else why not.
std::string checkpoint_problem(const std::filesystem::path& dir);

struct FoundCheckpoint {
  std::filesystem::path dir;
  CheckpointManifest manifest;
};

// The newest complete checkpoint under `root` (step-* directories, newest
// first); each newer one passed over adds "step-N: why" to `skipped`.
std::optional<FoundCheckpoint> find_newest_checkpoint(const std::filesystem::path& root,
                                                      std::vector<std::string>* skipped = nullptr);
// Keeps the `keep` newest complete checkpoints and anything newer than the
// newest complete one (it may be being written); removes the rest. Returns
// the directories removed.
std::vector<std::filesystem::path> prune_checkpoints(const std::filesystem::path& root, int keep);

// Removes every step-* directory under `root` newer than `step` (resume: a
// timeline that was abandoned). Returns the directories removed.
std::vector<std::filesystem::path> remove_checkpoints_after(const std::filesystem::path& root, std::int64_t step);

// What `--resume PATH` names: a checkpoint directory (has manifest.json or is
// called step-*), a checkpoint root (holds step-*), or a run directory
// (PATH/checkpoints, else `config`'s checkpoint root). Returns the checkpoint
// to resume from; CheckpointError saying what was looked at when there is
// none. Checkpoints passed over are added to `skipped`.
FoundCheckpoint resolve_resume(const std::filesystem::path& path, const RunConfig& config,
                               std::vector<std::string>* skipped = nullptr);

}  // namespace pstrain
