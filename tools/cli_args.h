// A small command-line flag parser for the mpx tool: declared flags, --flag=value, help text and typo suggestions.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace mpx::cli {

/// A usage error (unknown flag, missing or malformed value): main prints it and exits with 2.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& msg) : std::runtime_error(msg) {}
};

/// The flags of one command. Declare them, parse argv, then read typed values; every
/// getter throws UsageError naming the flag and the expected form.
class Args {
 public:
  /// `command` is used in messages ("mpx train"); `usage` is the first line of --help.
  Args(std::string command, std::string usage);

  /// A flag that takes a value. `names` are the spellings ("-b", "--batch-size"); the first
  /// long one is the canonical key for the getters. `def` is shown in --help and returned
  /// when the flag is absent ("" = no default).
  Args& option(std::vector<std::string> names, std::string metavar, std::string help, std::string def = "");
  /// A switch without a value (`--evaluate`); also accepts --flag=true/false.
  Args& flag(std::vector<std::string> names, std::string help);
  /// Names the positional argument (at most one), for help text; none declared means positionals are errors.
  Args& positional(std::string metavar, std::string help);

  /// Parses argv (without the program and command names). Returns false when --help was
  /// given (help was printed to stdout). Throws UsageError on unknown flags, with the
  /// closest known flag as a suggestion.
  bool parse(int argc, char** argv);

  /// True when the flag was given on the command line.
  bool given(const std::string& name) const;
  /// The value given, or the declared default.
  std::string str(const std::string& name) const;
  /// The value as an integer; throws UsageError if it is not one or is outside [min, max].
  int64_t integer(const std::string& name, int64_t min = INT64_MIN, int64_t max = INT64_MAX) const;
  /// The value as a finite number; throws UsageError if it is not one or is below `min`.
  double number(const std::string& name, double min = -1e308) const;
  /// A switch's state (or a value flag read as true/false/1/0/yes/no).
  bool on(const std::string& name) const;
  /// The value, which must be one of `choices` (case-sensitive).
  std::string choice(const std::string& name, const std::vector<std::string>& choices) const;
  /// Replaces a flag's default (e.g. with the value a resumed checkpoint was trained with).
  void set_default(const std::string& name, std::string value);
  /// The positional argument, if any.
  const std::optional<std::string>& positional_value() const { return positional_; }

  /// The --help text.
  std::string help() const;
  const std::string& command() const { return command_; }

 private:
  struct Spec {
    std::vector<std::string> names;
    std::string metavar, help, def;
    bool takes_value = true;
  };
  const Spec& spec(const std::string& name) const;
  Spec& spec(const std::string& name);
  std::string key_of(const Spec& s) const;
  std::string suggest(const std::string& given) const;

  std::string command_, usage_;
  std::vector<Spec> specs_;
  std::map<std::string, std::string> values_;  // canonical key -> value ("1" for switches)
  std::string positional_metavar_, positional_help_;
  std::optional<std::string> positional_;
};

/// Levenshtein distance (for "did you mean").
size_t edit_distance(const std::string& a, const std::string& b);

/// The closest of `candidates` to `given` when it is close enough to be a typo, else "".
std::string closest(const std::string& given, const std::vector<std::string>& candidates);

}  // namespace mpx::cli
