// Seconds for messages: "5", "0.25" (no trailing zeros).
#pragma once

#include <string>

namespace tensorverbs {

inline std::string seconds(double value) {
  std::string text = std::to_string(value);
  text.erase(text.find_last_not_of('0') + 1);
  if (!text.empty() && text.back() == '.') text.pop_back();
  return text;
}

}  // namespace tensorverbs
