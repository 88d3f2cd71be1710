// Training progress display: the in-place bar for terminals and the log-line fallback.
#include "tools/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace mpx::cli {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

bool Progress::stdout_is_tty() {
  const char* force = std::getenv("MPX_PROGRESS");
  if (force != nullptr && std::strcmp(force, "plain") == 0) return false;
  if (force != nullptr && std::strcmp(force, "bar") == 0) return true;
  return isatty(STDOUT_FILENO) != 0;
}

Progress::Progress(int64_t epoch, int64_t epochs, int64_t total, int64_t batch, int64_t print_freq, bool tty,
                   int64_t first_step, FILE* out)
    : epoch_(epoch), epochs_(epochs), total_(total), batch_(batch), print_freq_(std::max<int64_t>(1, print_freq)),
      tty_(tty), first_step_(first_step), out_(out), start_(std::chrono::steady_clock::now()), last_draw_() {}

double Progress::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

double Progress::images_per_second() const {
  const double s = seconds();
  return s > 0 ? static_cast<double>((last_step_ - first_step_) * batch_) / s : 0.0;
}

std::string Progress::line(int64_t step, const ProgressStats& st) const {
  const double ips = images_per_second();
  const double done = static_cast<double>(step - first_step_);
  const double eta = done > 0 ? seconds() / done * static_cast<double>(total_ - step) : NAN;
  char buf[512];
  int n = std::snprintf(buf, sizeof buf, "epoch %lld/%lld", static_cast<long long>(epoch_),
                        static_cast<long long>(epochs_));
  std::string s(buf, n);
  if (tty_) {
    // A 20-cell bar: enough to see movement, short enough to fit 100 columns with the numbers.
    const int cells = 20;
    const int fill = total_ > 0 ? static_cast<int>(cells * step / total_) : cells;
    s += " [" + std::string(fill, '#') + std::string(cells - fill, '.') + "]";
  }
  n = std::snprintf(buf, sizeof buf, " %lld/%lld  %.0f img/s  loss %.4f", static_cast<long long>(step),
                    static_cast<long long>(total_), ips, st.loss);
  s.append(buf, n);
  if (st.top1 >= 0) s.append(buf, std::snprintf(buf, sizeof buf, "  top1 %.2f%%", st.top1));
  if (st.loss_scale > 0) s.append(buf, std::snprintf(buf, sizeof buf, "  scale %g", st.loss_scale));
  if (st.loss_scale > 0 || st.skipped > 0)
    s.append(buf, std::snprintf(buf, sizeof buf, "  skipped %lld", static_cast<long long>(st.skipped)));
  if (!st.extra.empty()) s += "  " + st.extra;
  s += "  ETA " + format_duration(step >= total_ ? 0.0 : eta);
  return s;
}

bool Progress::due(int64_t step) const {
  if (tty_) return step >= total_ || std::chrono::steady_clock::now() - last_draw_ >= std::chrono::milliseconds(100);
  return step % print_freq_ == 0 || step == total_;
}

void Progress::update(int64_t step, const ProgressStats& stats) {
  last_step_ = step;
  const auto now = std::chrono::steady_clock::now();
  if (tty_) {
    if (step < total_ && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    const std::string l = line(step, stats);
    // Pad with spaces over a longer previous line so no stale characters remain.
    std::fprintf(out_, "\r%s%s", l.c_str(), std::string(last_len_ > l.size() ? last_len_ - l.size() : 0, ' ').c_str());
    last_len_ = l.size();
    open_ = true;
    std::fflush(out_);
  } else if (step % print_freq_ == 0 || step == total_) {
    std::fprintf(out_, "%s\n", line(step, stats).c_str());
    std::fflush(out_);
  }
}

void Progress::finish() {
  if (open_) std::fputc('\n', out_);
  open_ = false;
  std::fflush(out_);
}

}  // namespace mpx::cli
