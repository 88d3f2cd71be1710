// einsum: the equation parsed into labels, operands reduced and contracted pairwise through bmm (the floating case).
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "ops/elementwise.h"
#include "ops/linalg.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"

namespace mpx {
namespace {

// Labels: letters by their character code; the dims an ellipsis stands for by kEllipsis + k, k counted over the
// common (right-aligned) block of all operands' ellipsis dims.
constexpr int kEllipsis = 256;
using Labels = std::vector<int>;

struct Term {
  Labels labels;
  bool ellipsis = false;
  size_t ellipsis_at = 0;  // position of "..." among the letters
};

Term parse_term(const std::string& s, const std::string& eq) {
  Term t;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      t.labels.push_back(c);
    } else if (c == '.') {
      MPX_CHECK(s.compare(i, 3, "...") == 0 && !t.ellipsis, "einsum: '", eq,
                "': an ellipsis is written '...' and appears at most once per term");
      t.ellipsis = true;
      t.ellipsis_at = t.labels.size();
      i += 2;
    } else {
      MPX_ERROR("einsum: '", eq, "': unexpected character '", std::string(1, c),
                "'; subscripts are letters a-z, A-Z and '...', terms separated by ',' and the output after '->'");
    }
  }
  return t;
}

// The labels of a term with its ellipsis expanded into `e` dims, right-aligned in a block of `block`.
Labels expand(const Term& t, int64_t e, int64_t block) {
  Labels l(t.labels.begin(), t.labels.begin() + static_cast<std::ptrdiff_t>(t.ellipsis_at));
  for (int64_t k = 0; k < e; ++k) l.push_back(kEllipsis + static_cast<int>(block - e + k));
  l.insert(l.end(), t.labels.begin() + static_cast<std::ptrdiff_t>(t.ellipsis_at), t.labels.end());
  return l;
}

bool has(const Labels& l, int x) { return std::find(l.begin(), l.end(), x) != l.end(); }
int64_t pos(const Labels& l, int x) { return std::find(l.begin(), l.end(), x) - l.begin(); }

// Sums the dims of x whose labels are not in `keep` (dropping them from `l`).
Tensor sum_out(const Tensor& x, Labels& l, const Labels& keep) {
  IntList dims;
  Labels rest;
  for (size_t d = 0; d < l.size(); ++d) {
    if (has(keep, l[d])) rest.push_back(l[d]);
    else dims.push_back(static_cast<int64_t>(d));
  }
  if (dims.empty()) return x;
  l = rest;
  return sum(x, dims);
}

// A label that appears twice in one operand takes the diagonal: the product with an identity mask summed over the
// second occurrence (differentiable, no strided-view trick needed).
Tensor take_diagonals(Tensor x, Labels& l, const std::string& equation) {
  for (size_t a = 0; a < l.size(); ++a)
    for (size_t b = a + 1; b < l.size();) {
      if (l[b] != l[a]) {
        ++b;
        continue;
      }
      const int64_t n = x.size(static_cast<int64_t>(a));
      MPX_CHECK(x.size(static_cast<int64_t>(b)) == n, "einsum: '", equation, "': label '", std::string(1, static_cast<char>(l[a])),
                "' repeated in one operand has sizes ", n, " and ", x.size(static_cast<int64_t>(b)));
      IntList ra(static_cast<size_t>(x.dim()), 1), rb(static_cast<size_t>(x.dim()), 1);
      ra[a] = n;
      rb[b] = n;
      const TensorOptions o = TensorOptions(kInt64).device(x.device());
      const Tensor mask = eq(arange(static_cast<double>(n), o).reshape(ra), arange(static_cast<double>(n), o).reshape(rb));
      x = sum(x * mask.to(x.dtype()), {static_cast<int64_t>(b)});
      l.erase(l.begin() + static_cast<std::ptrdiff_t>(b));
    }
  return x;
}

// x's dims in the order of `order` (labels x lacks become size-1 dims).
Tensor arrange(const Tensor& x, const Labels& l, const Labels& order) {
  IntList perm, shape;
  for (int lab : order)
    if (has(l, lab)) perm.push_back(pos(l, lab));
  Tensor y = x.permute(perm);
  for (int lab : order) shape.push_back(has(l, lab) ? x.size(pos(l, lab)) : 1);
  return y.reshape(shape);
}

int64_t prod(const Tensor& x, const Labels& l, const Labels& sel) {
  int64_t p = 1;
  for (int lab : sel) p *= x.size(pos(l, lab));
  return p;
}

// a (labels la) contracted with b (labels lb), keeping the labels in `keep`; returns the result and sets `out`.
Tensor contract(Tensor a, Labels la, Tensor b, Labels lb, const Labels& keep, Labels& out) {
  // Labels of size 1 on one side broadcast to the other's size.
  for (size_t d = 0; d < la.size(); ++d)
    if (has(lb, la[d])) {
      const int64_t sa = a.size(static_cast<int64_t>(d)), sb = b.size(pos(lb, la[d]));
      if (sa == sb) continue;
      if (sa == 1) {
        IntList s = a.sizes();
        s[d] = sb;
        a = a.expand(s);
      } else {
        IntList s = b.sizes();
        s[static_cast<size_t>(pos(lb, la[d]))] = sa;
        b = b.expand(s);
      }
    }
  Labels batch, con, aonly, bonly;
  for (int lab : la) {
    if (!has(lb, lab)) aonly.push_back(lab);
    else if (has(keep, lab)) batch.push_back(lab);
    else con.push_back(lab);
  }
  for (int lab : lb)
    if (!has(la, lab)) bonly.push_back(lab);
  out = batch;
  out.insert(out.end(), aonly.begin(), aonly.end());
  out.insert(out.end(), bonly.begin(), bonly.end());
  IntList shape;
  for (int lab : out) shape.push_back(has(la, lab) ? a.size(pos(la, lab)) : b.size(pos(lb, lab)));
  if (!is_floating(a.dtype()) || !is_floating(b.dtype())) {
    // Integers (no GEMM kernel): a broadcast product summed over the contracted labels.
    Labels all = out;
    all.insert(all.end(), con.begin(), con.end());
    Tensor p = arrange(a, la, all) * arrange(b, lb, all);
    if (con.empty()) return p;
    IntList dims;
    for (size_t k = 0; k < con.size(); ++k) dims.push_back(static_cast<int64_t>(out.size() + k));
    return sum(p, dims);
  }
  Labels oa = batch, ob = batch;
  oa.insert(oa.end(), aonly.begin(), aonly.end());
  oa.insert(oa.end(), con.begin(), con.end());
  ob.insert(ob.end(), con.begin(), con.end());
  ob.insert(ob.end(), bonly.begin(), bonly.end());
  const int64_t nb = prod(a, la, batch), m = prod(a, la, aonly), k = prod(a, la, con), n = prod(b, lb, bonly);
  const Tensor a3 = arrange(a, la, oa).reshape({nb, m, k}), b3 = arrange(b, lb, ob).reshape({nb, k, n});
  return bmm(a3, b3).reshape(shape);
}

}  // namespace

Tensor einsum(const std::string& equation, const tensor_list& operands) {
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq.push_back(c);
  MPX_CHECK(!operands.empty(), "einsum: '", equation, "': no operands");
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<Term> terms;
  for (size_t b = 0;;) {
    const size_t e = lhs.find(',', b);
    terms.push_back(parse_term(lhs.substr(b, e == std::string::npos ? std::string::npos : e - b), equation));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  MPX_CHECK(terms.size() == operands.size(), "einsum: '", equation, "' has ", terms.size(), " input terms for ",
            operands.size(), " operands");
  int64_t block = 0;
  std::vector<int64_t> edims(terms.size());
  for (size_t i = 0; i < terms.size(); ++i) {
    MPX_CHECK(operands[i].defined(), "einsum: operand ", i, " is undefined");
    const int64_t named = static_cast<int64_t>(terms[i].labels.size());
    const int64_t nd = operands[i].dim();
    MPX_CHECK(terms[i].ellipsis ? nd >= named : nd == named, "einsum: '", equation, "': operand ", i, " ",
              ops::describe(operands[i]), " has ", nd, " dims but its term names ", named,
              terms[i].ellipsis ? " (plus '...')" : "");
    edims[i] = nd - named;
    block = std::max(block, edims[i]);
  }
  std::vector<Labels> labels;
  std::map<int, int> count;
  std::map<int, int64_t> size;
  for (size_t i = 0; i < terms.size(); ++i) {
    labels.push_back(expand(terms[i], edims[i], block));
    for (size_t d = 0; d < labels[i].size(); ++d) {
      const int lab = labels[i][d];
      const int64_t s = operands[i].size(static_cast<int64_t>(d));
      ++count[lab];
      auto [it, fresh] = size.emplace(lab, s);
      if (!fresh && it->second != s) {
        MPX_CHECK(it->second == 1 || s == 1, "einsum: '", equation, "': ",
                  lab >= kEllipsis ? std::string("a dim of '...'") : "label '" + std::string(1, static_cast<char>(lab)) + "'",
                  " has size ", it->second, " in one operand and ", s, " in operand ", i, "; sizes must match or be 1");
        it->second = std::max(it->second, s);
      }
    }
  }
  // The output: as written, or (implicit) the ellipsis dims then the letters used once, in alphabetical order.
  Labels out;
  if (arrow != std::string::npos) {
    const Term t = parse_term(eq.substr(arrow + 2), equation);
    out = expand(t, t.ellipsis ? block : 0, block);
    for (size_t a = 0; a < out.size(); ++a) {
      MPX_CHECK(out[a] >= kEllipsis || count.count(out[a]), "einsum: '", equation, "': output label '",
                std::string(1, static_cast<char>(out[a])), "' is not in any input");
      MPX_CHECK(std::count(out.begin(), out.end(), out[a]) == 1, "einsum: '", equation, "': output label '",
                std::string(1, static_cast<char>(out[a])), "' appears twice");
    }
  } else {
    for (int64_t k = 0; k < block; ++k) out.push_back(kEllipsis + static_cast<int>(k));
    for (const auto& [lab, c] : count)
      if (lab < kEllipsis && c == 1) out.push_back(lab);
  }
  // Each operand: diagonals, then the labels no one else needs summed away; then contracted left to right.
  std::vector<Tensor> xs;
  for (size_t i = 0; i < operands.size(); ++i) {
    Tensor x = take_diagonals(operands[i], labels[i], equation);
    Labels keep = out;
    for (size_t j = 0; j < operands.size(); ++j)
      if (j != i) keep.insert(keep.end(), labels[j].begin(), labels[j].end());
    xs.push_back(sum_out(x, labels[i], keep));
  }
  Tensor r = xs[0];
  Labels lr = labels[0];
  for (size_t i = 1; i < xs.size(); ++i) {
    Labels keep = out;
    for (size_t j = i + 1; j < xs.size(); ++j) keep.insert(keep.end(), labels[j].begin(), labels[j].end());
    Labels next;
    r = contract(r, lr, xs[i], labels[i], keep, next);
    lr = next;
  }
  r = sum_out(r, lr, out);
  // Output labels missing from the result (size 1 everywhere they appeared) and the final order.
  IntList shape;
  for (int lab : out) shape.push_back(has(lr, lab) ? r.size(pos(lr, lab)) : size.at(lab));
  Tensor y = arrange(r, lr, out);
  return y.sizes() == shape ? y : y.expand(shape).contiguous();
}

}  // namespace mpx
