// A training run's output folder and checkpoint files: ownership, writability, leftovers, checksums, model_best.
#include "tools/run_dir.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

namespace mpx::cli {

namespace fs = std::filesystem;

std::string new_run_id() {
  std::random_device rd;
  const uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string checkpoint_run_id(const std::string& path) {
  // Only the header is read: a checkpoint of a large model need not be loaded to know its run.
  std::ifstream f(path, std::ios::binary);
  unsigned char len[8];
  if (!f.read(reinterpret_cast<char*>(len), 8)) return "";
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n > (100u << 20)) return "";
  std::string h(static_cast<size_t>(n), '\0');
  if (!f.read(h.data(), static_cast<std::streamsize>(n))) return "";
  size_t at = h.find("\"run.id\"");
  if (at == std::string::npos) return "";
  at = h.find('"', h.find(':', at + 8));
  const size_t end = at == std::string::npos ? at : h.find('"', at + 1);
  return end == std::string::npos ? "" : h.substr(at + 1, end - at - 1);
}

std::string io_problem(const std::string& path, const std::error_code& ec) {
  if (ec == std::errc::permission_denied || ec == std::errc::operation_not_permitted)
    return path + ": permission denied; check the permissions of it and of the folders above it";
  if (ec == std::errc::read_only_file_system) return path + " is on a read-only file system";
  return path + ": " + ec.message();
}

namespace {

bool is_leftover(const std::string& name) { return name.find(".tmp-") != std::string::npos; }

bool belongs(const RunFiles& rf, const std::string& name) {
  for (const auto& f : rf.files)
    if (name == f) return true;
  for (const auto& p : rf.prefixes)
    if (name.rfind(p, 0) == 0) return true;
  return false;
}

}  // namespace

std::string claim_out(const std::string& out, const RunFiles& rf, const std::string& run_id, const std::string& resume,
                      bool overwrite) {
  std::error_code ec, made;
  fs::create_directories(out, made);
  if (!fs::is_directory(out, ec))
    MPX_ERROR("--out ", out, ": cannot create the folder (", io_problem(out, made ? made : ec), "); pick another --out");
  // A killed writer leaves "<file>.tmp-<random>" behind; nothing else writes such names.
  int removed = 0;
  std::vector<std::string> theirs;
  fs::directory_iterator it(out, ec);
  if (ec) MPX_ERROR("--out ", out, ": cannot list the folder (", io_problem(out, ec), ")");
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const std::string name = it->path().filename().string();
    if (is_leftover(name)) {
      std::error_code e2;
      if (fs::remove(it->path(), e2)) ++removed;
    } else if (belongs(rf, name)) {
      theirs.push_back(name);
    }
  }
  if (removed > 0)
    std::printf("removed %d temporary file%s left in %s by an interrupted write\n", removed, removed == 1 ? "" : "s",
                out.c_str());
  const fs::path ck = fs::path(out) / "checkpoint.safetensors";
  if (!theirs.empty()) {
    bool ours = false;
    if (!resume.empty()) {
      std::error_code e2;
      ours = fs::exists(ck, e2) && (fs::equivalent(ck, resume, e2) || (!run_id.empty() && checkpoint_run_id(ck.string()) == run_id));
    }
    if (!ours && !overwrite) {
      std::sort(theirs.begin(), theirs.end(), [](const std::string& a, const std::string& b) {
        return (a == "checkpoint.safetensors") > (b == "checkpoint.safetensors") ||
               ((a == "checkpoint.safetensors") == (b == "checkpoint.safetensors") && a < b);
      });
      std::string what = theirs.front() + (theirs.size() > 1 ? " and " + std::to_string(theirs.size() - 1) + " more" : "");
      if (resume.empty())
        MPX_ERROR("--out ", out, " already holds a run (", what, "); continue it with --resume ", ck.string(),
                  ", pick another --out, or pass --overwrite to replace it");
      MPX_ERROR("--out ", out, " holds another run's files (", what, "), not the run of ", resume,
                "; pick another --out (or leave it out to continue in the checkpoint's folder), or pass --overwrite to "
                "replace them");
    }
    if (!ours)
      for (const auto& name : theirs) fs::remove(fs::path(out) / name, ec);
  }
  // Proven writable now rather than after the first epoch.
  const fs::path probe = fs::path(out) / (".mpx-write-test-" + std::to_string(getpid()));
  {
    std::FILE* f = std::fopen(probe.c_str(), "wb");
    if (!f) {
      const std::error_code e(errno, std::generic_category());
      MPX_ERROR("--out ", out, " is not writable (", io_problem(out, e), "); pick another --out");
    }
    const bool ok = std::fputs("mpx", f) >= 0;
    const bool closed = std::fclose(f) == 0;
    fs::remove(probe, ec);
    MPX_CHECK(ok && closed, "--out ", out, ": writing a test file failed (disk full?); free space or pick another --out");
  }
  return ck.string();
}

namespace {

// A 64-bit multiply-xorshift hash over 8-byte words: fast enough to run on every checkpoint.
struct Hasher {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  void word(uint64_t w) {
    h ^= w + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
  }
  void bytes(const void* p, size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, c + i, 8);
      word(w);
    }
    uint64_t tail = 0;
    std::memcpy(&tail, c + i, n - i);
    word(tail ^ (static_cast<uint64_t>(n) << 56));
  }
  void text(const std::string& s) { bytes(s.data(), s.size()); }
};

std::string checksum(const TensorDict& tensors, const Metadata& meta) {
  Hasher h;
  for (const auto& [name, t] : tensors) {  // TensorDict is ordered by name
    h.text(name);
    const Tensor c = t.to(Device::cpu()).contiguous();
    h.text(std::string(dtype_name(c.dtype())) + shape_str(c.sizes()));
    h.bytes(c.raw_data(), static_cast<size_t>(c.numel()) * element_size(c.dtype()));
  }
  for (const auto& [k, v] : meta)
    if (k != "checksum") h.text(k + "=" + v);
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h.h));
  return buf;
}

}  // namespace

void save_checkpoint_file(const TensorDict& tensors, Metadata meta, const std::string& path) {
  meta["checksum"] = checksum(tensors, meta);
  save_tensors(tensors, path, meta);
}

void verify_checksum(const TensorDict& tensors, const Metadata& meta, const std::string& path) {
  auto it = meta.find("checksum");
  if (it == meta.end()) return;
  MPX_CHECK(checksum(tensors, meta) == it->second, "--resume ", path,
            " is damaged: its contents do not match the checksum written with it (a changed or flipped bit); use "
            "another checkpoint (model_best.safetensors beside it is a copy of the best epoch) or start without --resume");
}

void copy_file_atomic(const std::string& from, const std::string& to) {
  const std::string tmp = to + ".tmp-" + new_run_id();
  std::error_code ec;
  fs::copy_file(from, tmp, fs::copy_options::overwrite_existing, ec);
  if (!ec) fs::rename(tmp, to, ec);
  if (ec) {
    std::error_code e2;
    fs::remove(tmp, e2);
    MPX_ERROR("cannot write ", to, " (", io_problem(to, ec), ")");
  }
}

void append_lines(const std::string& path, const std::vector<std::string>& lines) {
  std::ofstream f(path, std::ios::app);
  for (const auto& l : lines) f << l << "\n";
  MPX_CHECK(f.good(), "cannot append to ", path, "; check that --out is writable and not full");
}

}  // namespace mpx::cli
