// The mpx tool's flag parser: declared flags, --flag=value, help text and "did you mean" suggestions.
#include "tools/cli_args.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace mpx::cli {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string closest(const std::string& given, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(given, c);
    if (d < best_d) best_d = d, best = c;
  }
  // A third of the length (at least 2 edits) still reads as a typo; more is a different word.
  return best_d <= std::max<size_t>(2, given.size() / 3) ? best : "";
}

Args::Args(std::string command, std::string usage) : command_(std::move(command)), usage_(std::move(usage)) {}

Args& Args::option(std::vector<std::string> names, std::string metavar, std::string help, std::string def) {
  specs_.push_back({std::move(names), std::move(metavar), std::move(help), std::move(def), true});
  return *this;
}

Args& Args::flag(std::vector<std::string> names, std::string help) {
  specs_.push_back({std::move(names), "", std::move(help), "", false});
  return *this;
}

Args& Args::positional(std::string metavar, std::string help) {
  positional_metavar_ = std::move(metavar);
  positional_help_ = std::move(help);
  return *this;
}

std::string Args::key_of(const Spec& s) const {
  for (const auto& n : s.names)
    if (n.rfind("--", 0) == 0) return n;
  return s.names.front();
}

const Args::Spec& Args::spec(const std::string& name) const {
  for (const auto& s : specs_)
    for (const auto& n : s.names)
      if (n == name) return s;
  // A getter asking for an undeclared flag is a bug in the tool, not the user's mistake.
  throw std::logic_error("mpx cli: flag " + name + " was not declared");
}

Args::Spec& Args::spec(const std::string& name) {
  return const_cast<Spec&>(static_cast<const Args*>(this)->spec(name));
}

void Args::set_default(const std::string& name, std::string value) { spec(name).def = std::move(value); }

std::string Args::suggest(const std::string& given) const {
  std::vector<std::string> all;
  for (const auto& s : specs_)
    for (const auto& n : s.names)
      if (n.size() > 2) all.push_back(n);
  all.push_back("--help");
  const std::string c = closest(given, all);
  return c.empty() ? "" : " (did you mean " + c + "?)";
}

bool Args::parse(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(help().c_str(), stdout);
      return false;
    }
    if (a.size() < 2 || a[0] != '-' || (a[1] >= '0' && a[1] <= '9') || a == "-") {
      if (positional_metavar_.empty())
        throw UsageError(command_ + " takes no positional argument, got '" + a + "' (see " + command_ + " --help)");
      if (positional_)
        throw UsageError(command_ + ": two positional arguments, '" + *positional_ + "' and '" + a +
                         "'; give one " + positional_metavar_);
      positional_ = a;
      continue;
    }
    std::optional<std::string> inline_value;
    if (const size_t eq = a.find('='); eq != std::string::npos && a.rfind("--", 0) == 0) {
      inline_value = a.substr(eq + 1);
      a = a.substr(0, eq);
    }
    const Spec* s = nullptr;
    for (const auto& sp : specs_)
      if (std::find(sp.names.begin(), sp.names.end(), a) != sp.names.end()) s = &sp;
    // argparse's attached short values: -b32 and -b=32 are -b 32 (for flags that take a value).
    if (s == nullptr && a.size() > 2 && a[1] != '-') {
      for (const auto& sp : specs_)
        if (sp.takes_value && std::find(sp.names.begin(), sp.names.end(), a.substr(0, 2)) != sp.names.end()) s = &sp;
      if (s != nullptr) {
        inline_value = a[2] == '=' ? a.substr(3) : a.substr(2);
        a = a.substr(0, 2);
      }
    }
    if (s == nullptr) throw UsageError(command_ + ": unknown flag " + a + suggest(a) + "; see " + command_ + " --help");
    const std::string key = key_of(*s);
    if (!s->takes_value) {
      values_[key] = inline_value.value_or("1");
      continue;
    }
    if (inline_value) {
      values_[key] = *inline_value;
    } else {
      if (i + 1 >= argc) throw UsageError(command_ + ": flag " + a + " needs a value (" + s->metavar + ")");
      // `--text --steps 2`: the value forgotten, the next flag would be swallowed as it.
      const std::string next = argv[i + 1], next_name = next.substr(0, next.find('='));
      for (const auto& sp : specs_)
        if (next.size() > 1 && next[0] == '-' && std::find(sp.names.begin(), sp.names.end(), next_name) != sp.names.end())
          throw UsageError(command_ + ": flag " + a + " needs a value (" + s->metavar + "), got the flag " + next_name +
                           " (write " + a + "=" + next + " if that really is the value)");
      values_[key] = argv[++i];
    }
  }
  return true;
}

bool Args::given(const std::string& name) const { return values_.count(key_of(spec(name))) != 0; }

std::string Args::str(const std::string& name) const {
  const Spec& s = spec(name);
  auto it = values_.find(key_of(s));
  return it != values_.end() ? it->second : s.def;
}

int64_t Args::integer(const std::string& name, int64_t min, int64_t max) const {
  const std::string v = str(name);
  int64_t out = 0;
  size_t used = 0;
  bool too_large = false;
  try {
    out = std::stoll(v, &used);
  } catch (const std::out_of_range&) {
    too_large = true;
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string flag = command_ + ": " + key_of(spec(name));
  if (too_large && v[0] == '-') throw UsageError(flag + " must be at least " + std::to_string(min) + ", got " + v);
  if (too_large || (!v.empty() && used == v.size() && out > max))
    throw UsageError(flag + " must be at most " + std::to_string(max) + ", got " + v);
  if (v.empty() || used != v.size()) throw UsageError(flag + " expects an integer, got '" + v + "'");
  if (out < min) throw UsageError(flag + " must be at least " + std::to_string(min) + ", got " + v);
  return out;
}

double Args::number(const std::string& name, double min) const {
  const std::string v = str(name);
  double out = 0;
  size_t used = 0;
  try {
    out = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (v.empty() || used != v.size() || !std::isfinite(out))
    throw UsageError(command_ + ": " + key_of(spec(name)) + " expects a number, got '" + v + "'");
  if (out < min) {
    std::ostringstream os;
    os << command_ << ": " << key_of(spec(name)) << " must be at least " << min << ", got " << v;
    throw UsageError(os.str());
  }
  return out;
}

bool Args::on(const std::string& name) const {
  std::string v = str(name);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v.empty() || v == "0" || v == "false" || v == "no" || v == "off") return false;
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  throw UsageError(command_ + ": " + key_of(spec(name)) + " expects True or False, got '" + str(name) + "'");
}

std::string Args::choice(const std::string& name, const std::vector<std::string>& choices) const {
  const std::string v = str(name);
  if (std::find(choices.begin(), choices.end(), v) != choices.end()) return v;
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
  const std::string c = closest(v, choices);
  throw UsageError(command_ + ": " + key_of(spec(name)) + " must be one of " + list + ", got '" + v + "'" +
                   (c.empty() ? "" : " (did you mean " + c + "?)"));
}

std::string Args::help() const {
  std::ostringstream os;
  os << "usage: " << usage_ << "\n";
  if (!positional_metavar_.empty()) os << "\n  " << positional_metavar_ << "\n      " << positional_help_ << "\n";
  os << "\nflags:\n";
  for (const auto& s : specs_) {
    std::string names;
    for (const auto& n : s.names) names += (names.empty() ? "" : ", ") + n;
    if (s.takes_value) names += " " + s.metavar;
    os << "  " << names << "\n      " << s.help;
    if (!s.def.empty()) os << " (default: " << s.def << ")";
    os << "\n";
  }
  os << "  -h, --help\n      this text\n";
  return os.str();
}

}  // namespace mpx::cli
