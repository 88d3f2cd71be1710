// OrderedDict: an insertion-ordered string-keyed map, what named_parameters()/state_dict() return.
#pragma once
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"

namespace mpx::nn {

/// An insertion-ordered dictionary with string keys (LibTorch's torch::OrderedDict).
/// Items are (key, value) pairs that also answer key()/value(), so both
/// `for (auto& [name, t] : d)` and `for (auto& item : d) item.key()` work.
template <typename Key, typename Value>
class OrderedDict {
 public:
  /// One entry: a pair with LibTorch's accessor names.
  struct Item : std::pair<Key, Value> {
    using std::pair<Key, Value>::pair;
    const Key& key() const { return this->first; }
    Value& value() { return this->second; }
    const Value& value() const { return this->second; }
    const std::pair<Key, Value>& pair() const { return *this; }
  };
  using iterator = typename std::vector<Item>::iterator;
  using const_iterator = typename std::vector<Item>::const_iterator;

  OrderedDict() = default;
  /// `what` names the kind of entry in error messages ("parameter", "key").
  explicit OrderedDict(std::string what) : what_(std::move(what)) {}
  OrderedDict(std::initializer_list<Item> items) {
    for (const auto& it : items) insert(it.first, it.second);
  }

  /// Appends an entry; throws when the key already exists.
  Value& insert(const Key& key, Value value) {
    MPX_CHECK(!index_.count(key), "OrderedDict: ", what_, " '", key, "' already exists");
    index_.emplace(key, items_.size());
    items_.emplace_back(key, std::move(value));
    return items_.back().second;
  }
  /// Inserts or overwrites in place (keeps the original position).
  Value& insert_or_assign(const Key& key, Value value) {
    auto it = index_.find(key);
    if (it == index_.end()) return insert(key, std::move(value));
    return items_[it->second].second = std::move(value);
  }
  /// Removes an entry (positions of later entries shift down by one).
  void erase(const Key& key) {
    auto it = index_.find(key);
    MPX_CHECK(it != index_.end(), "OrderedDict: no ", what_, " named '", key, "'");
    items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(it->second));
    reindex();
  }

  Value& operator[](const Key& key) { return items_[checked(key)].second; }
  const Value& operator[](const Key& key) const { return items_[checked(key)].second; }
  Value& at(const Key& key) { return (*this)[key]; }
  const Value& at(const Key& key) const { return (*this)[key]; }
  /// Null when the key is absent.
  Value* find(const Key& key) {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &items_[it->second].second;
  }
  const Value* find(const Key& key) const {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &items_[it->second].second;
  }
  bool contains(const Key& key) const { return index_.count(key) > 0; }

  size_t size() const { return items_.size(); }
  bool is_empty() const { return items_.empty(); }
  bool empty() const { return items_.empty(); }
  void clear() { items_.clear(); index_.clear(); }

  const std::vector<Item>& items() const { return items_; }
  std::vector<Key> keys() const {
    std::vector<Key> r;
    r.reserve(items_.size());
    for (const auto& i : items_) r.push_back(i.first);
    return r;
  }
  std::vector<Value> values() const {
    std::vector<Value> r;
    r.reserve(items_.size());
    for (const auto& i : items_) r.push_back(i.second);
    return r;
  }
  /// The entries as a std::map (what mpx::save / load_tensors work with).
  std::map<Key, Value> to_map() const {
    std::map<Key, Value> m;
    for (const auto& i : items_) m.emplace(i.first, i.second);
    return m;
  }

  Item& operator[](size_t i) { return items_.at(i); }
  const Item& operator[](size_t i) const { return items_.at(i); }
  iterator begin() { return items_.begin(); }
  iterator end() { return items_.end(); }
  const_iterator begin() const { return items_.begin(); }
  const_iterator end() const { return items_.end(); }

 private:
  size_t checked(const Key& key) const {
    auto it = index_.find(key);
    MPX_CHECK(it != index_.end(), "OrderedDict: no ", what_, " named '", key, "'");
    return it->second;
  }
  void reindex() {
    index_.clear();
    for (size_t i = 0; i < items_.size(); ++i) index_.emplace(items_[i].first, i);
  }

  std::string what_ = "key";
  std::vector<Item> items_;
  std::unordered_map<Key, size_t> index_;
};

}  // namespace mpx::nn
