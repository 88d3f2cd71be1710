// Metrics and report output of the mpx tool: CSV/JSON-lines logs, result tables, CSV/JSON records, SVG charts.
#pragma once
#include <limits>
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

/// A text table of string cells: the first three columns are labels (left-aligned), the rest
/// numbers (right-aligned).
struct Table {
  std::vector<std::string> head;
  std::vector<std::vector<std::string>> rows;
  /// Columns padded to their widest cell, for a terminal.
  std::string aligned() const;
  /// A GitHub Markdown table.
  std::string markdown() const;
};

/// One named column of a result record: a number or a text.
struct Cell {
  std::string name;
  double num = std::numeric_limits<double>::quiet_NaN();
  std::string text;
  bool is_text = false;
};
using Record = std::vector<Cell>;
Cell num_cell(std::string name, double v);
Cell text_cell(std::string name, std::string text);

/// Writes `dir`/`stem`.csv (the first record's names as header; commas in texts become ';') and
/// `dir`/`stem`.json ({provenance..., "rows": [records]}), both atomically.
void write_records(const std::string& dir, const std::string& stem, const std::vector<Record>& records,
                   const std::vector<std::pair<std::string, std::string>>& provenance);

/// One bar of a bar chart: a group (one panel per group), a label, the value with its min-max
/// whisker, and a reference value drawn as a tick (NaN: none).
struct Bar {
  std::string group, label;
  double value, lo, hi, reference;
};
/// Bars side by side, one panel (with its own axis) per group in `groups` order; a bar's colour
/// follows the digit after its label's first letter (O0..O3); the reference tick's tooltip names
/// `reference_name`. `caption` goes under the panels.
std::string render_bars(const std::string& title, const std::string& ylabel, const std::string& reference_name,
                        const std::vector<std::string>& groups, const std::vector<Bar>& bars, const std::string& caption);

/// `v` with `digits` decimals, or "n/a" when it is not finite.
std::string fixed(double v, int digits);
/// A rate with a sensible number of digits for tiny CPU and huge GPU figures alike (below 1,
/// e.g. GPT-2 sequences/s on a CPU, three decimals).
std::string rate(double v);
/// Today's local date as YYYY-MM-DD.
std::string today();

}  // namespace mpx::cli
