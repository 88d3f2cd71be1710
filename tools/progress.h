// Training progress display: a bar redrawn in place on a terminal, periodic log lines otherwise.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace mpx::cli {

/// What one progress update shows.
struct ProgressStats {
  double loss = 0;        ///< running mean loss of the epoch so far
  double top1 = -1;       ///< running top-1 accuracy in % (negative: not shown)
  double loss_scale = 0;  ///< current loss scale (0: not shown, e.g. O0 without amp scaling)
  int64_t skipped = 0;    ///< optimizer steps skipped on overflow so far
  std::string extra;      ///< appended verbatim (e.g. "D 0.69 G 0.70")
};

/// One epoch's progress. With a TTY the line is redrawn with '\r' at most ~10 times a
/// second and finished with a newline; otherwise a plain line is printed every
/// `print_freq` steps and at the last step, so logs stay readable when redirected.
class Progress {
 public:
  /// `total` steps this epoch (starting at `first_step`, e.g. after a mid-epoch resume),
  /// `batch` images per step, epochs counted from 1.
  Progress(int64_t epoch, int64_t epochs, int64_t total, int64_t batch, int64_t print_freq, bool tty,
           int64_t first_step = 0, FILE* out = stdout);
  /// Reports that `step` (1-based, counting first_step) steps are done.
  void update(int64_t step, const ProgressStats& stats);
  /// The same, with the stats computed only when a line is drawn: reading values that live on
  /// a GPU waits for it, which the steps between two lines then never do.
  template <typename F>
  void update_lazy(int64_t step, F&& stats) {
    if (due(step)) update(step, stats());
    else last_step_ = step;
  }
  /// Whether update(step, ...) would draw now.
  bool due(int64_t step) const;
  /// Ends the line (TTY mode) so later output starts on a fresh line.
  void finish();
  /// Images per second since the epoch (or the resumed part of it) started.
  double images_per_second() const;
  double seconds() const;

  /// Whether stdout is a terminal (and MPX_PROGRESS=plain does not force log lines).
  static bool stdout_is_tty();

 private:
  std::string line(int64_t step, const ProgressStats& s) const;
  int64_t epoch_, epochs_, total_, batch_, print_freq_;
  bool tty_;
  int64_t first_step_, last_step_ = 0;
  FILE* out_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  size_t last_len_ = 0;
  bool open_ = false;
};

/// "1:02:03" / "2:03" from seconds.
std::string format_duration(double seconds);

}  // namespace mpx::cli
