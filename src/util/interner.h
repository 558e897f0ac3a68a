// Stores each distinct string once; the views it hands out stay valid for its lifetime, so
// rows can carry names without a copy per event.
#pragma once
#include <string>
#include <string_view>
#include <unordered_set>

namespace eacgm {

class Interner {
 public:
  std::string_view intern(std::string_view s) {
    // unordered_set nodes never move on rehash, so views into them stay valid.
    auto it = strings_.find(std::string(s));
    if (it == strings_.end()) it = strings_.emplace(s).first;
    return *it;
  }
  size_t size() const { return strings_.size(); }

 private:
  std::unordered_set<std::string> strings_;
};

}  // namespace eacgm
