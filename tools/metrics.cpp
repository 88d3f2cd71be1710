// CSV / JSON-lines metrics logs, result tables and records, and the SVG charts the mpx tool writes to --out.
#include "tools/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "core/error.h"
#include "core/json.h"

namespace mpx::cli {

namespace fs = std::filesystem;

std::string format_number(double v, bool as_json) {
  if (as_json || std::isfinite(v)) return json::number(v);
  return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp-" + std::to_string(std::random_device{}());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    MPX_CHECK(f.good(), "cannot write ", tmp, ": check that the folder exists and is writable");
    f << text;
    f.flush();
    if (!f.good()) {
      std::error_code ec;
      fs::remove(tmp, ec);
      MPX_ERROR("writing ", tmp, " failed (disk full?)");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    MPX_ERROR("cannot replace ", path, ": ", ec.message());
  }
}

MetricsLog::MetricsLog(const std::string& dir, const std::string& stem)
    : csv_((fs::path(dir) / (stem + ".csv")).string()), jsonl_((fs::path(dir) / (stem + ".jsonl")).string()) {}

void MetricsLog::write_row(const Row& row, bool header) {
  std::ofstream csv(csv_, std::ios::app);
  std::ofstream js(jsonl_, std::ios::app);
  MPX_CHECK(csv.good() && js.good(), "cannot append to ", csv_, " / ", jsonl_, ": check that --out is writable");
  if (header) {
    for (size_t i = 0; i < row.size(); ++i) csv << (i ? "," : "") << row[i].first;
    csv << "\n";
  }
  for (size_t i = 0; i < row.size(); ++i) csv << (i ? "," : "") << format_number(row[i].second, false);
  csv << "\n";
  std::string line = "{";
  for (size_t i = 0; i < row.size(); ++i) {
    if (i) line += ", ";
    json::append_string(line, row[i].first);
    line += ": " + json::number(row[i].second);
  }
  js << line << "}\n";
}

void MetricsLog::append(const Row& row) {
  std::error_code ec;
  const bool header = !fs::exists(csv_, ec) || fs::file_size(csv_, ec) == 0;
  write_row(row, header);
  rows_.push_back(row);
}

void MetricsLog::resume(const std::string& key, double max_key, const std::string& from) {
  rows_.clear();
  std::error_code ec0;
  std::ifstream f(!from.empty() && !fs::exists(csv_, ec0) ? from : csv_);
  if (f.good()) {
    std::string line;
    std::vector<std::string> names;
    while (std::getline(f, line)) {
      if (line.empty()) continue;
      std::vector<std::string> cells;
      std::stringstream ss(line);
      for (std::string c; std::getline(ss, c, ',');) cells.push_back(c);
      if (names.empty()) {
        names = cells;
        continue;
      }
      Row r;
      for (size_t i = 0; i < names.size() && i < cells.size(); ++i) r.emplace_back(names[i], std::strtod(cells[i].c_str(), nullptr));
      bool keep = true;
      for (const auto& [n, v] : r)
        if (n == key && v > max_key) keep = false;
      if (keep) rows_.push_back(std::move(r));
    }
  }
  std::error_code ec;
  fs::remove(csv_, ec);
  fs::remove(jsonl_, ec);
  for (size_t i = 0; i < rows_.size(); ++i) write_row(rows_[i], i == 0);
}

std::vector<std::pair<double, double>> MetricsLog::column(const std::string& xname, const std::string& name) const {
  std::vector<std::pair<double, double>> out;
  for (const auto& r : rows_) {
    double x = NAN, y = NAN;
    for (const auto& [n, v] : r) {
      if (n == xname) x = v;
      if (n == name) y = v;
    }
    if (std::isfinite(x) && std::isfinite(y)) out.emplace_back(x, y);
  }
  return out;
}

std::string Table::aligned() const {
  std::vector<size_t> w(head.size());
  for (size_t i = 0; i < head.size(); ++i) w[i] = head[i].size();
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) w[i] = std::max(w[i], r[i].size());
  std::ostringstream o;
  auto line = [&](const std::vector<std::string>& r) {
    for (size_t i = 0; i < r.size(); ++i) {
      const std::string pad(w[i] - r[i].size(), ' ');
      o << (i ? "  " : "") << (i < 3 ? r[i] + pad : pad + r[i]);
    }
    o << "\n";
  };
  line(head);
  size_t total = 0;
  for (size_t x : w) total += x + 2;
  o << std::string(total - 2, '-') << "\n";
  for (const auto& r : rows) line(r);
  return o.str();
}

std::string Table::markdown() const {
  std::ostringstream o;
  o << "|";
  for (const auto& h : head) o << " " << h << " |";
  o << "\n|";
  for (size_t i = 0; i < head.size(); ++i) o << (i < 3 ? "---|" : "---:|");
  o << "\n";
  for (const auto& r : rows) {
    o << "|";
    for (const auto& c : r) o << " " << c << " |";
    o << "\n";
  }
  return o.str();
}

Cell num_cell(std::string name, double v) { return Cell{std::move(name), v, "", false}; }
Cell text_cell(std::string name, std::string text) { return Cell{std::move(name), NAN, std::move(text), true}; }

void write_records(const std::string& dir, const std::string& stem, const std::vector<Record>& records,
                   const std::vector<std::pair<std::string, std::string>>& provenance) {
  std::string csv, js = "{";
  for (size_t r = 0; r < records.size(); ++r) {
    if (r == 0) {
      for (size_t i = 0; i < records[r].size(); ++i) csv += (i ? "," : "") + records[r][i].name;
      csv += "\n";
    }
    for (size_t i = 0; i < records[r].size(); ++i) {
      const Cell& c = records[r][i];
      std::string t = c.is_text ? c.text : format_number(c.num, false);
      std::replace(t.begin(), t.end(), ',', ';');  // keeps the CSV's columns intact
      csv += (i ? "," : "") + t;
    }
    csv += "\n";
  }
  for (const auto& [k, v] : provenance) js += json::quote(k) + ": " + json::quote(v) + ", ";
  js += "\"rows\": [";
  for (size_t r = 0; r < records.size(); ++r) {
    js += r ? ",\n  {" : "\n  {";
    for (size_t i = 0; i < records[r].size(); ++i) {
      const Cell& c = records[r][i];
      js += (i ? ", " : "") + json::quote(c.name) + ": " + (c.is_text ? json::quote(c.text) : json::number(c.num));
    }
    js += "}";
  }
  js += "\n]}\n";
  write_file_atomic((fs::path(dir) / (stem + ".csv")).string(), csv);
  write_file_atomic((fs::path(dir) / (stem + ".json")).string(), js);
}

std::string fixed(double v, int digits) {
  if (!std::isfinite(v)) return "n/a";
  char b[48];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

std::string rate(double v) { return !std::isfinite(v) ? "n/a" : fixed(v, v < 1 ? 3 : v < 100 ? 1 : 0); }

std::string today() {
  const std::time_t t = std::time(nullptr);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%d", std::localtime(&t));
  return b;
}

namespace {

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else o += c;
  }
  return o;
}

// "Nice" tick step (1, 2 or 5 times a power of ten) giving about `n` ticks over `span`.
double tick_step(double span, int n) {
  if (!(span > 0)) return 1;
  const double raw = span / n, p = std::pow(10.0, std::floor(std::log10(raw))), f = raw / p;
  return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", std::fabs(v) < 1e-12 ? 0.0 : v);
  return buf;
}

const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"};

}  // namespace

std::string render_svg(const std::string& title, const std::vector<Panel>& panels) {
  const double pw = 460, ph = 320, ml = 60, mr = 20, mt = 50, mb = 50;  // panel size and margins
  const double W = pw * static_cast<double>(std::max<size_t>(1, panels.size())), H = ph + 55;
  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W
    << " " << H << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << W / 2 << "\" y=\"20\" text-anchor=\"middle\" font-size=\"15\">" << esc(title) << "</text>\n";
  for (size_t p = 0; p < panels.size(); ++p) {
    const Panel& pan = panels[p];
    const double ox = pw * static_cast<double>(p), x0 = ox + ml, x1 = ox + pw - mr, y0 = 30 + ph - mb, y1 = 30 + mt;
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (const auto& s : pan.series)
      for (const auto& [x, y] : s.points)
        if (std::isfinite(x) && std::isfinite(y)) {
          xmin = std::min(xmin, x), xmax = std::max(xmax, x), ymin = std::min(ymin, y), ymax = std::max(ymax, y);
        }
    if (!std::isfinite(xmin)) xmin = 0, xmax = 1, ymin = 0, ymax = 1;
    if (xmax == xmin) xmin -= 0.5, xmax += 0.5;
    if (ymax == ymin) ymin -= 0.5, ymax += 0.5;
    const double ys = tick_step(ymax - ymin, 5);
    ymin = std::floor(ymin / ys) * ys, ymax = std::ceil(ymax / ys) * ys;
    auto X = [&](double x) { return x0 + (x - xmin) / (xmax - xmin) * (x1 - x0); };
    auto Y = [&](double y) { return y0 - (y - ymin) / (ymax - ymin) * (y0 - y1); };
    o << "<g>\n<text x=\"" << (x0 + x1) / 2 << "\" y=\"" << y1 - 12 << "\" text-anchor=\"middle\" font-size=\"13\">"
      << esc(pan.title) << "</text>\n";
    // Axes, ticks and grid lines.
    o << "<line x1=\"" << x0 << "\" y1=\"" << y0 << "\" x2=\"" << x1 << "\" y2=\"" << y0 << "\" stroke=\"black\"/>\n"
      << "<line x1=\"" << x0 << "\" y1=\"" << y0 << "\" x2=\"" << x0 << "\" y2=\"" << y1 << "\" stroke=\"black\"/>\n";
    for (double y = ymin; y <= ymax + ys * 1e-6; y += ys)
      o << "<line x1=\"" << x0 << "\" y1=\"" << Y(y) << "\" x2=\"" << x1 << "\" y2=\"" << Y(y)
        << "\" stroke=\"#ddd\"/><text x=\"" << x0 - 5 << "\" y=\"" << Y(y) + 4 << "\" text-anchor=\"end\">" << fmt(y)
        << "</text>\n";
    const double xs = tick_step(xmax - xmin, 6);
    for (double x = std::ceil(xmin / xs) * xs; x <= xmax + xs * 1e-6; x += xs)
      o << "<line x1=\"" << X(x) << "\" y1=\"" << y0 << "\" x2=\"" << X(x) << "\" y2=\"" << y0 + 4
        << "\" stroke=\"black\"/><text x=\"" << X(x) << "\" y=\"" << y0 + 17 << "\" text-anchor=\"middle\">" << fmt(x)
        << "</text>\n";
    o << "<text x=\"" << (x0 + x1) / 2 << "\" y=\"" << y0 + 35 << "\" text-anchor=\"middle\">" << esc(pan.xlabel)
      << "</text>\n<text transform=\"translate(" << ox + 15 << "," << (y0 + y1) / 2
      << ") rotate(-90)\" text-anchor=\"middle\">" << esc(pan.ylabel) << "</text>\n";
    for (size_t i = 0; i < pan.series.size(); ++i) {
      const Series& s = pan.series[i];
      const char* color = kColors[i % (sizeof kColors / sizeof kColors[0])];
      o << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"1.5\" points=\"";
      for (const auto& [x, y] : s.points)
        if (std::isfinite(x) && std::isfinite(y)) o << fmt(X(x)) << "," << fmt(Y(y)) << " ";
      o << "\"/>\n";
      if (s.points.size() == 1)  // a lone point is invisible as a polyline
        o << "<circle cx=\"" << X(s.points[0].first) << "\" cy=\"" << Y(s.points[0].second) << "\" r=\"3\" fill=\""
          << color << "\"/>\n";
      // The legend sits in a row under the axis label, where no curve can hide it.
      const double lx = x0 + 120 * static_cast<double>(i), ly = y0 + 55;
      o << "<line x1=\"" << lx << "\" y1=\"" << ly << "\" x2=\"" << lx + 20 << "\" y2=\"" << ly << "\" stroke=\""
        << color << "\" stroke-width=\"2\"/><text x=\"" << lx + 25 << "\" y=\"" << ly + 4 << "\">" << esc(s.name)
        << "</text>\n";
    }
    o << "</g>\n";
  }
  o << "</svg>\n";
  return o.str();
}

std::string render_bars(const std::string& title, const std::string& ylabel, const std::string& reference_name,
                        const std::vector<std::string>& groups, const std::vector<Bar>& bars, const std::string& caption) {
  const double pw = 360, ph = 320, ml = 65, mr = 15, mt = 50, mb = 70;
  const double W = pw * static_cast<double>(std::max<size_t>(1, groups.size())), H = ph + 40;
  const char* colors[] = {"#7f7f7f", "#1f77b4", "#2ca02c", "#d62728"};  // O0..O3
  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W
    << "\" height=\"" << H << "\" viewBox=\"0 0 " << W << " " << H
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << W / 2 << "\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">" << esc(title) << "</text>\n";
  for (size_t m = 0; m < groups.size(); ++m) {
    std::vector<const Bar*> mine;
    double top = 0;
    for (const Bar& b : bars)
      if (b.group == groups[m]) {
        mine.push_back(&b);
        for (double v : {b.value, b.hi, b.reference})
          if (std::isfinite(v)) top = std::max(top, v);
      }
    if (!(top > 0)) top = 1;
    const double p10 = std::pow(10.0, std::floor(std::log10(top))), step = top / p10 > 5 ? 2 * p10 : top / p10 > 2 ? p10 : p10 / 2;
    top = std::ceil(top / step) * step;
    const double ox = pw * static_cast<double>(m), x0 = ox + ml, x1 = ox + pw - mr, y0 = 30 + ph - mb, y1 = 30 + mt;
    auto Y = [&](double v) { return y0 - v / top * (y0 - y1); };
    o << "<g>\n<text x=\"" << (x0 + x1) / 2 << "\" y=\"" << y1 - 14 << "\" text-anchor=\"middle\" font-size=\"13\">"
      << esc(groups[m]) << "</text>\n";
    for (double v = 0; v <= top + step * 1e-6; v += step)
      o << "<line x1=\"" << x0 << "\" y1=\"" << Y(v) << "\" x2=\"" << x1 << "\" y2=\"" << Y(v)
        << "\" stroke=\"#ddd\"/><text x=\"" << x0 - 5 << "\" y=\"" << Y(v) + 4 << "\" text-anchor=\"end\">" << v
        << "</text>\n";
    o << "<line x1=\"" << x0 << "\" y1=\"" << y0 << "\" x2=\"" << x1 << "\" y2=\"" << y0 << "\" stroke=\"black\"/>\n"
      << "<text transform=\"translate(" << ox + 14 << "," << (y0 + y1) / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
      << esc(ylabel) << "</text>\n";
    const double slot = (x1 - x0) / static_cast<double>(std::max<size_t>(1, mine.size())), bw = slot * 0.6;
    for (size_t k = 0; k < mine.size(); ++k) {
      const Bar& b = *mine[k];
      const double cx = x0 + slot * (static_cast<double>(k) + 0.5);
      const int lvl = std::clamp(b.label.size() > 1 ? b.label[1] - '0' : 0, 0, 3);
      if (std::isfinite(b.value))
        o << "<rect class=\"bar\" x=\"" << cx - bw / 2 << "\" y=\"" << Y(b.value) << "\" width=\"" << bw
          << "\" height=\"" << y0 - Y(b.value) << "\" fill=\"" << colors[lvl] << "\"><title>" << esc(b.label) << ": "
          << rate(b.value) << " " << esc(ylabel) << "</title></rect>\n";
      if (std::isfinite(b.lo) && std::isfinite(b.hi))
        o << "<line x1=\"" << cx << "\" y1=\"" << Y(b.lo) << "\" x2=\"" << cx << "\" y2=\"" << Y(b.hi)
          << "\" stroke=\"black\"/>\n";
      if (std::isfinite(b.reference))
        o << "<line class=\"peer\" x1=\"" << cx - bw / 2 - 3 << "\" y1=\"" << Y(b.reference) << "\" x2=\""
          << cx + bw / 2 + 3 << "\" y2=\"" << Y(b.reference) << "\" stroke=\"black\" stroke-width=\"2.5\"><title>" << esc(reference_name) << " "
          << esc(b.label) << ": " << rate(b.reference) << " " << esc(ylabel) << "</title></line>\n";
      o << "<text transform=\"translate(" << cx + 4 << "," << y0 + 8 << ") rotate(45)\">" << esc(b.label) << "</text>\n";
    }
    o << "</g>\n";
  }
  o << "<text x=\"10\" y=\"" << H - 8 << "\">" << esc(caption) << "</text>\n</svg>\n";
  return o.str();
}

void write_svg(const std::string& path, const std::string& title, const std::vector<Panel>& panels) {
  write_file_atomic(path, render_svg(title, panels));
}

}  // namespace mpx::cli
