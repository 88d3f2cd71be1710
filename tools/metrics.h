// Metrics output of the mpx tool: CSV and JSON-lines logs and hand-written SVG line charts.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace mpx::cli {

/// One metrics record: named numbers in column order.
using Row = std::vector<std::pair<std::string, double>>;

/// Appends rows to `<stem>.csv` (header written when the file is new) and `<stem>.jsonl`.
class MetricsLog {
 public:
  /// `dir`/`stem`.csv and .jsonl. Nothing is written until append().
  MetricsLog(const std::string& dir, const std::string& stem);
  /// Appends one row to both files (and keeps it in rows()).
  void append(const Row& row);
  /// Reloads the rows already in the CSV whose `key` column is <= `max_key` and rewrites both
  /// files with just those, so a resumed run continues the history without duplicates.
  /// Missing files are not an error (nothing to keep). When this log has no CSV yet, the rows
  /// are taken from `from` (the CSV of the run being continued in a new folder), if given.
  void resume(const std::string& key, double max_key, const std::string& from = "");
  const std::vector<Row>& rows() const { return rows_; }
  /// The column `name` of every row that has it, as (x from `xname`, y) pairs.
  std::vector<std::pair<double, double>> column(const std::string& xname, const std::string& name) const;
  const std::string& csv_path() const { return csv_; }
  const std::string& jsonl_path() const { return jsonl_; }

 private:
  void write_row(const Row& row, bool header);
  std::string csv_, jsonl_;
  std::vector<Row> rows_;
};

/// A named polyline.
struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;
};

/// One chart: axes with labels and ticks, one polyline per series, a legend.
struct Panel {
  std::string title, xlabel, ylabel;
  std::vector<Series> series;
};

/// Renders panels side by side as a standalone SVG document (no external resources).
std::string render_svg(const std::string& title, const std::vector<Panel>& panels);
/// render_svg written atomically to `path` (temp file + rename).
void write_svg(const std::string& path, const std::string& title, const std::vector<Panel>& panels);

/// Writes `text` to `path` atomically: a temp file in the same folder renamed over it.
void write_file_atomic(const std::string& path, const std::string& text);

/// A number as CSV/JSON text: integers without a fraction, others with round-trip precision;
/// non-finite values as "nan"/"inf" in CSV and null in JSON.
std::string format_number(double v, bool json);

}  // namespace mpx::cli
