// The building blocks of the generated documents (docs/benchmarks.md, docs/experiments.md;
// experiments/benchmarks_doc.cc): the data set of one benchmark run as committed in docs/data/
// (<bench>.jsonl rows, status.tsv provenance, machine.txt, series/), markdown tables and numbers
// formatted the same way every time, and gnuplot scripts.
//
// Everything here is deterministic: the same data set gives byte-identical markdown and gnuplot
// scripts (scripts/check-docs.sh relies on it). Paths written into the outputs are relative to the
// document's directory, never absolute.
//
// Thread-safety: plain values and free functions; a DataSet / Plots instance is used from one thread.
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace edl::docs {

using Json = nlohmann::ordered_json;  // keeps the fields in the order a bench wrote them
using Rows = std::vector<Json>;
using Series = std::vector<std::pair<double, double>>;

// One line of status.tsv (scripts/run-benchmarks.sh): name, ran|skipped|failed, note, command,
// commit, UTC start, wall seconds, 1-min load average at start and at end. Missing fields are "".
struct Provenance {
  std::string name, status, note, command, commit, start, wall_s, load_start, load_end;
};

// "Ran: commit X, started T, W s, load average A at start / B at end; command: `C`." (or why not).
std::string provenance_line(const Provenance& p);

// The committed data set of one run of scripts/run-benchmarks.sh.
struct DataSet {
  std::string dir;                                 // where it was read from
  std::map<std::string, Rows> rows;                // <bench>.jsonl, by bench name
  std::map<std::string, Provenance> status;        // status.tsv, by bench name
  std::string machine;                             // machine.txt (one line), "" if absent

  // The rows of `bench` (empty if it has none).
  const Rows& of(const std::string& bench) const;
  // Its provenance line, or "Not run in this data set." when status.tsv does not name it.
  std::string provenance(const std::string& bench) const;
};

// Reads every *.jsonl, status.tsv and machine.txt of `dir`. A line that is not a JSON object is
// skipped with a message on stderr.
DataSet load_dataset(const std::string& dir);

// Numbers: `fixed(v, 2)` = "%.2f"; cell() formats a JSON value for a table (integers as they are,
// floats with 3 significant decimals or %.3g for very large / small values).
std::string fixed(double v, int decimals);
std::string signed_fixed(double v, int decimals);  // with a leading '+' for v >= 0
std::string cell(const Json& v);

// Markdown table of `rows`: the given columns, or the union of the rows' keys in first-seen order.
void table(std::ostream& out, const Rows& rows, std::vector<std::string> cols = {}, size_t max_rows = 300);
// A table from ready-made cells.
void table(std::ostream& out, const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& body);

// Rows that have `key`; rows whose `key` equals `value`.
Rows having(const Rows& rows, const std::string& key);
Rows matching(const Rows& rows, const std::string& key, const Json& value);
double num(const Json& row, const std::string& key, double fallback = 0);
double median(std::vector<double> v);  // NaN when empty
// "<median> (<min>-<max>, <count> <unit>)" of the values that are not NaN; "no rows" when none.
std::string median_range(std::vector<double> v, int decimals, const std::string& unit);

// gnuplot scripts, one per figure: <img_dir>/<name>.gp writes <img_rel>/<name>.png when gnuplot runs
// in the document's directory. data_rel: the data set directory as seen from there (series files).
class Plots {
 public:
  Plots(std::string img_dir, std::string img_rel, std::string data_rel);
  // Writes the script; returns the markdown image link.
  std::string add(const std::string& name, const std::string& body, const std::string& caption, int w = 900,
                  int h = 480);
  // The markdown image link of a figure added before (for a second document).
  std::string link(const std::string& name, const std::string& caption) const;
  // The caption it was added with ("" if it was not).
  std::string caption(const std::string& name) const;
  const std::string& data_rel() const { return data_rel_; }
  const std::vector<std::string>& names() const { return names_; }

 private:
  std::string img_dir_, img_rel_, data_rel_;
  std::vector<std::string> names_;
  std::map<std::string, std::string> captions_;
};

// A gnuplot inline data block "$name << EOD ... EOD" with %.6g numbers.
std::string datablock(const std::string& name, const Series& xy);
// `s` with every character that is not alphanumeric replaced by '_'.
std::string ident(std::string s);

}  // namespace edl::docs
