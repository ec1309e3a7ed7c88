#pragma once
// Crash-safe file system steps shared by the checkpoint writers (the FSDP plugin's shards, the trainer's state):
// data reaches the disk (fsync) before a rename publishes it, and the rename itself is made durable by syncing the
// parent directory. A directory is published complete or not at all: write into a hidden temporary sibling, then
// publish_dir(). Errors are EngineryError naming the path and the errno text.
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

namespace enginery {
namespace durable {

// fsync of a file or a directory.
void sync_path(const std::filesystem::path& path);

// Writes `bytes` to `path` (truncating), fsyncs it. The caller publishes it by renaming its directory.
void write_file(const std::filesystem::path& path, const std::string& bytes);

// Writes `bytes` under a temporary name beside `path`, fsyncs, renames over `path`, fsyncs the parent.
void replace_file(const std::filesystem::path& path, const std::string& bytes);

// The hidden names a directory <name> takes on its way, in its parent: .<name>.tmp while it is built,
// .<name>.replaced while a replacement without an atomic exchange sets the previous one aside, .<name>.deleting
// while it is removed. A kill can leave each; finish_interrupted() clears the last two, fresh_dir() the first.
constexpr const char* kTempSuffix = ".tmp";
constexpr const char* kReplacedSuffix = ".replaced";
constexpr const char* kDeletingSuffix = ".deleting";

// The hidden working name of a directory being built for `final_path`: <parent>/.<name>.tmp
std::filesystem::path temp_dir_for(const std::filesystem::path& final_path);

// "<name>" for ".<name><suffix>", else "".
std::string published_name_of(const std::string& hidden_name, const std::string& suffix);

// Removes whatever a killed writer left at temp_dir_for(final_path) and creates it empty (with parents).
void fresh_dir(const std::filesystem::path& dir);

// fsyncs `temp_dir`, renames it to `final_path`, fsyncs the parent. An existing `final_path` (the same step saved
// again) is replaced atomically: the two are exchanged (renameat2 RENAME_EXCHANGE), so `final_path` names a
// complete directory at every moment, then the previous one is removed. Where the file system cannot exchange
// (NFS), the previous one is first moved to .<name>.replaced; a kill before the new one is in place leaves it there,
// and finish_interrupted() puts it back. The caller checks that the previous one holds only what it wrote.
void publish_dir(const std::filesystem::path& temp_dir, const std::filesystem::path& final_path);

// Deletes a published directory so that a kill mid-way never leaves a half-deleted one under its real name: it is
// renamed to .<name>.deleting first (made durable), then removed.
void retire_dir(const std::filesystem::path& dir);

// Finishes what a kill left of publish_dir() or retire_dir() for `final_path`: .<name>.replaced is put back when
// `final_path` is missing (it was the only copy), else removed; .<name>.deleting is removed. Returns one line per
// thing done, for a note.
std::vector<std::string> finish_interrupted(const std::filesystem::path& final_path);

// finish_interrupted() for every global_step_<N> of `root` that has such a leftover (retention, or a replacement
// of that step). Hidden names of any other shape are not ours and are left alone.
std::vector<std::string> finish_interrupted_checkpoints(const std::filesystem::path& root);

// The names directly in `dir` that are not in `ours`, sorted: what replacing `dir` would delete besides what its
// writer wrote there.
std::vector<std::string> foreign_entries(const std::filesystem::path& dir, const std::set<std::string>& ours);

// Retention of verl-named checkpoints: when `just_written` is named global_step_<N>, keeps the `max_keep` newest
// siblings named global_step_<M> that contain `complete_marker` (always counting `just_written`, never deleting it)
// and retires the others; max_keep <= 0 keeps everything. Counts what is on disk, so it works across restarts.
// Returns the directories removed.
std::vector<std::filesystem::path> retain_newest(const std::filesystem::path& just_written, int64_t max_keep,
                                                 const std::string& complete_marker);

// The N of a directory named global_step_<N>, or -1.
int64_t global_step_of(const std::filesystem::path& dir);

}  // namespace durable
}  // namespace enginery
