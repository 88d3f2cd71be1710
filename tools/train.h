// `mpx train` as a callable function, so `mpx bench --accuracy` runs the very same training loop per opt level.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace mpx::cli {

/// What a finished `mpx train` run reports back to a caller (bench's accuracy mode).
struct TrainSummary {
  std::string arch;                                         ///< the model actually trained
  double seconds = 0;                                       ///< wall time of the training loop (evaluations included)
  double best_top1 = -1;                                    ///< best test top-1 % over the epochs
  double loss_scale = 0;                                    ///< amp's loss scale at the end
  int64_t skipped = 0;                                      ///< optimizer steps skipped on overflow
  std::vector<std::pair<double, double>> step_loss;         ///< (fractional epoch, training loss) per step
  std::vector<std::pair<double, double>> train_loss;        ///< (epoch, mean training loss)
  std::vector<std::pair<double, double>> test_loss;         ///< (epoch, test loss)
  std::vector<std::pair<double, double>> test_top1;         ///< (epoch, test top-1 %)
  std::vector<std::pair<double, double>> images_per_s;      ///< (epoch, training images/s)
  std::string metrics_csv;                                  ///< the run's metrics.csv
};

/// Runs `mpx train` with `argv` (the flags after "train"); fills `summary` (may be null) when
/// the run trains to the end. Returns the exit code `mpx train` would.
int train_main(int argc, char** argv, TrainSummary* summary);

}  // namespace mpx::cli
