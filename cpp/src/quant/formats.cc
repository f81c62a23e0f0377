// Calibration files other toolchains read: TensorRT's calibration cache and ncnn's int8 table.
//
// Both are line-oriented text. Writers refuse names the reader at the other end would split or
// truncate (rather than write a file that loads wrongly), and write entries sorted by name so
// that equal inputs give equal bytes. Readers report the line number and text of what they
// cannot parse.
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "tether/quant.h"
#include "util/utf8.h"

namespace tether::quant {

namespace {

// Lines of `text` without their line ends: "\n", "\r\n" or a lone "\r" (files passed through
// old Mac tools; neither format allows a '\r' inside an entry). No empty last line for a
// trailing line end.
std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find_first_of("\r\n", begin);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(begin, end - begin));
    begin = end + (text.compare(end, 2, "\r\n") == 0 ? 2 : 1);
  }
  return lines;
}

bool blank(const std::string& line) { return line.find_first_not_of(" \t") == std::string::npos; }

// `s` with each NUL byte written as "\0": an error message ends at its first NUL (what() is a
// C string), so one shown as it is would hide the rest of the message.
std::string visible(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\0') out += "\\0";
    else out += c;
  }
  return out;
}

std::string quoted_line(const std::string& line) {
  constexpr size_t kShown = 80;
  return "'" + visible(line.size() > kShown ? line.substr(0, kShown) + "..." : line) + "'";
}

[[noreturn]] void parse_error(const char* file, size_t index, const std::string& line, const std::string& why) {
  throw ParseError(std::string(file) + " line " + std::to_string(index + 1) + " " + quoted_line(line) + ": " + why);
}

// Names come back to Python as str, and both toolchains write UTF-8 (ASCII in practice). A NUL
// byte is valid UTF-8, but the C strings of TensorRT's and ncnn's own readers end at it, and an
// ONNX value name holds none, so a name with one names nothing.
void check_line_text(const char* file, size_t index, const std::string& line) {
  if (!util::is_valid_utf8(line)) parse_error(file, index, line, "the line is not valid UTF-8");
  if (const size_t nul = line.find('\0'); nul != std::string::npos)
    parse_error(file, index, line, "byte " + std::to_string(nul + 1) + " of the line is a NUL, which no name may hold");
}

std::string float_text(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

// ---- TensorRT ------------------------------------------------------------------------------

constexpr const char* kTrt = "TensorRT calibration cache";

void check_trt_text(const std::string& s, const std::string& what) {
  if (s.find_first_of("\r\n") != std::string::npos)
    throw ArgumentError(std::string(kTrt) + ": " + what + " '" + visible(s) + "' contains a line break");
  if (s.find('\0') != std::string::npos)
    throw ArgumentError(std::string(kTrt) + ": " + what + " '" + visible(s) + "' contains a NUL byte, which the reader refuses");
}

// ---- ncnn ----------------------------------------------------------------------------------

constexpr const char* kNcnn = "ncnn int8 table";
constexpr const char* kWeightSuffix = "_param_0";
// ncnn reads a key with "%255s": a longer one would be cut.
constexpr size_t kNcnnMaxKey = 255;

void check_ncnn_layer(const std::string& layer) {
  const std::string what = std::string(kNcnn) + ": layer name '" + visible(layer) + "'";
  if (layer.empty()) throw ArgumentError(std::string(kNcnn) + ": a layer name is empty");
  if (layer.find('\0') != std::string::npos) throw ArgumentError(what + " contains a NUL byte, which the reader refuses");
  if (layer.find_first_of(" \t\r\n\v\f") != std::string::npos)
    throw ArgumentError(what + " contains white space, which separates fields in the table");
  if (layer.find("_param_") != std::string::npos)
    throw ArgumentError(what + " contains '_param_', which ncnn reads as the mark of a weight line");
  if (layer.size() + std::char_traits<char>::length(kWeightSuffix) > kNcnnMaxKey)
    throw ArgumentError(what + " is longer than ncnn's keys (255 characters with '_param_0')");
}

// A scale of an ncnn table is 127 / max|x|: positive, and +inf where ncnn2table divided by
// the 0 of an all-zero channel or blob (tables it writes hold "inf" then). NaN, zero and
// negative scales mean nothing to ncnn and would poison, zero or flip every value.
bool ncnn_scale_ok(float v) { return v > 0.0f; }

// The writer refuses what the reader would.
void check_ncnn_scale(const std::string& layer, float scale) {
  if (!ncnn_scale_ok(scale))
    throw ArgumentError(std::string(kNcnn) + ": layer '" + layer + "' has scale " + float_text(scale) +
                        ", expected a positive float (127 / max|x|)");
}

// The shortest text that reads back as the same float (ncnn2table prints "%f", which drops
// digits; ncnn's reader takes any form sscanf("%f") accepts).
std::string shortest(float v) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

// One scale field of line `index`, as a float32; a ParseError naming the line otherwise.
float ncnn_scale(size_t index, const std::string& line, const std::string& token) {
  float v = 0;
  const auto res = std::from_chars(token.data(), token.data() + token.size(), v);
  if (res.ec == std::errc::result_out_of_range)
    parse_error(kNcnn, index, line, "the scale " + quoted_line(token) + " is out of float32's range");
  if (res.ec != std::errc() || res.ptr != token.data() + token.size())
    parse_error(kNcnn, index, line, quoted_line(token) + " is not a number");
  if (!ncnn_scale_ok(v))
    parse_error(kNcnn, index, line, "the scale " + float_text(v) + " is not positive (ncnn scales are 127 / max|x|)");
  return v;
}

std::vector<std::string> tokens(const std::string& line) {
  std::vector<std::string> out;
  size_t i = 0;
  while (true) {
    i = line.find_first_not_of(" \t", i);
    if (i == std::string::npos) break;
    const size_t end = std::min(line.find_first_of(" \t", i), line.size());
    out.push_back(line.substr(i, end - i));
    i = end;
  }
  return out;
}

}  // namespace

std::string write_tensorrt_cache(const std::map<std::string, float>& scales, const std::string& header) {
  check_trt_text(header, "header");
  if (header.rfind("TRT-", 0) != 0)
    throw ArgumentError(std::string(kTrt) + ": header '" + header + "' must start with 'TRT-' (e.g. TRT-8601-EntropyCalibration2)");
  std::string out = header + "\n";
  for (const auto& [name, scale] : scales) {
    if (name.empty()) throw ArgumentError(std::string(kTrt) + ": a tensor name is empty");
    check_trt_text(name, "tensor name");
    if (!std::isfinite(scale) || scale < 0.0f)
      throw ArgumentError(std::string(kTrt) + ": scale of '" + name + "' is " + float_text(scale) +
                          ", expected a finite non-negative float");
    char hex[16];
    std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(std::bit_cast<uint32_t>(scale)));
    out += name + ": " + hex + "\n";
  }
  return out;
}

std::map<std::string, float> read_tensorrt_cache(const std::string& text) {
  const std::vector<std::string> lines = split_lines(text);
  if (lines.empty() || lines[0].rfind("TRT-", 0) != 0)
    parse_error(kTrt, 0, lines.empty() ? "" : lines[0], "expected a header like 'TRT-8601-EntropyCalibration2'");
  check_line_text(kTrt, 0, lines[0]);
  std::map<std::string, float> scales;
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (blank(line)) continue;
    check_line_text(kTrt, i, line);
    // The value holds no ": ", so the last one separates it from a name that may hold some.
    const size_t sep = line.rfind(": ");
    if (sep == std::string::npos) parse_error(kTrt, i, line, "expected '<tensor name>: <8 hex digits>'");
    if (sep == 0) parse_error(kTrt, i, line, "the tensor name is empty");
    const std::string name = line.substr(0, sep), hex = line.substr(sep + 2);
    uint32_t bits = 0;
    const auto res = std::from_chars(hex.data(), hex.data() + hex.size(), bits, 16);
    if (hex.empty() || hex.size() > 8 || res.ec != std::errc() || res.ptr != hex.data() + hex.size())
      parse_error(kTrt, i, line, "the scale '" + hex + "' is not 1 to 8 hex digits");
    const auto scale = std::bit_cast<float>(bits);
    if (!std::isfinite(scale) || scale < 0.0f)
      parse_error(kTrt, i, line, "the scale " + float_text(scale) + " is not a finite non-negative float");
    if (!scales.emplace(name, scale).second) parse_error(kTrt, i, line, "tensor '" + name + "' appears twice");
  }
  return scales;
}

std::string write_ncnn_table(const NcnnTable& table) {
  std::string out;
  for (const auto& [layer, scales] : table.weight_scales) {
    check_ncnn_layer(layer);
    if (scales.empty()) throw ArgumentError(std::string(kNcnn) + ": layer '" + layer + "' has no weight scales");
    out += layer + kWeightSuffix;
    for (float s : scales) {
      check_ncnn_scale(layer, s);
      out += ' ';
      out += shortest(s);
    }
    out += "\n";
  }
  for (const auto& [layer, scale] : table.input_scales) {
    check_ncnn_layer(layer);
    check_ncnn_scale(layer, scale);
    out += layer;
    out += ' ';
    out += shortest(scale);
    out += '\n';
  }
  return out;
}

NcnnTable read_ncnn_table(const std::string& text) {
  const std::vector<std::string> lines = split_lines(text);
  NcnnTable table;
  const size_t suffix = std::char_traits<char>::length(kWeightSuffix);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    const std::vector<std::string> t = tokens(line);
    if (t.empty()) continue;
    check_line_text(kNcnn, i, line);
    if (t.size() == 1) parse_error(kNcnn, i, line, "expected a name followed by scales");
    std::vector<float> values;
    for (size_t k = 1; k < t.size(); ++k) values.push_back(ncnn_scale(i, line, t[k]));
    const std::string& key = t[0];
    const size_t mark = key.find("_param_");
    if (mark == std::string::npos) {
      if (values.size() != 1)
        parse_error(kNcnn, i, line, "expected one input scale for layer '" + key + "', found " + std::to_string(values.size()));
      if (!table.input_scales.emplace(key, values[0]).second)
        parse_error(kNcnn, i, line, "the input scale of layer '" + key + "' appears twice");
      continue;
    }
    if (mark == 0 || mark + suffix != key.size() || key.compare(mark, suffix, kWeightSuffix) != 0)
      parse_error(kNcnn, i, line, "only '<layer>_param_0' weight lines are supported (MultiHeadAttention's _param_1.. are not)");
    const std::string layer = key.substr(0, mark);
    if (!table.weight_scales.emplace(layer, std::move(values)).second)
      parse_error(kNcnn, i, line, "the weight scales of layer '" + layer + "' appear twice");
  }
  return table;
}

}  // namespace tether::quant
