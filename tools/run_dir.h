// A training run's output folder and checkpoint files: ownership, writability, leftovers of killed writers, checksums, model_best.
#pragma once
#include <string>
#include <vector>

#include <mpx/mpx.h>

namespace mpx::cli {

/// A fresh random run id (16 hex digits), stored in every checkpoint of the run as "run.id".
std::string new_run_id();

/// The "run.id" of a safetensors file, read from its header alone ("" when it has none or the
/// file cannot be read).
std::string checkpoint_run_id(const std::string& path);

/// What a command writes to its --out, so a folder can be told apart from an empty one and an
/// --overwrite knows what to remove.
struct RunFiles {
  std::string command;              ///< "train", "dcgan"
  std::vector<std::string> files;   ///< names in the folder ("metrics.csv", ...)
  std::vector<std::string> prefixes;///< name prefixes ("samples_epoch")
};

/// Makes `out` this run's folder before any data is read or step trained, and returns the path
/// of checkpoint.safetensors in it. It creates the folder and proves it writable (a probe file),
/// so a read-only --out fails now, with the system's reason; removes temporary files a killed
/// checkpoint or chart writer left; and refuses a folder holding another run's files: a fresh
/// run (`run_id` of a new run, `resume` "") takes only a folder without them, a resumed one only
/// its own (the checkpoint there has the same run id, or is the very file resumed). `overwrite`
/// removes the other run's files instead. Errors are mpx::Error naming the folder and the way out.
std::string claim_out(const std::string& out, const RunFiles& files, const std::string& run_id,
                      const std::string& resume, bool overwrite);

/// Saves a checkpoint with a checksum of its tensors and metadata ("checksum" in the metadata),
/// so a damaged file (a flipped bit) is refused on load instead of training on garbage.
void save_checkpoint_file(const TensorDict& tensors, Metadata meta, const std::string& path);
/// Throws mpx::Error naming `path` when `meta` has a checksum that the contents do not match
/// (files without one, from older versions, pass).
void verify_checksum(const TensorDict& tensors, const Metadata& meta, const std::string& path);

/// Copies `from` to `to` through a temporary file and a rename, so `to` is never half written.
void copy_file_atomic(const std::string& from, const std::string& to);

/// Appends `lines` to `path` (one per line); an mpx::Error naming it when that fails.
void append_lines(const std::string& path, const std::vector<std::string>& lines);

/// A sentence for an OS error on `path`: permission problems say so and what to do.
std::string io_problem(const std::string& path, const std::error_code& ec);

}  // namespace mpx::cli
