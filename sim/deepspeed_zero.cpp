// DeepSpeed versions and bands.
#include "sim/deepspeed_zero.h"

#include <charconv>

namespace accumcheck::sim {

std::optional<DeepSpeedVersion> DeepSpeedVersion::parse(std::string_view text) {
  DeepSpeedVersion v;
  int* fields[3] = {&v.major, &v.minor, &v.patch};
  const char* p = text.data();
  const char* end = text.data() + text.size();
  for (int i = 0; i < 3; ++i) {
    auto [next, ec] = std::from_chars(p, end, *fields[i]);
    if (ec != std::errc() || *fields[i] < 0) return std::nullopt;
    p = next;
    if (i < 2) {
      if (p == end || *p != '.') return std::nullopt;
      ++p;
    }
  }
  if (p != end) return std::nullopt;
  return v;
}

std::string DeepSpeedVersion::to_string() const {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

DeepSpeedBand band_of(const DeepSpeedVersion& v) {
  if (v < DeepSpeedVersion{0, 15, 2}) return DeepSpeedBand::A;
  if (v < DeepSpeedVersion{0, 16, 5}) return DeepSpeedBand::B1;
  if (v < DeepSpeedVersion{0, 19, 0}) return DeepSpeedBand::B2;
  return DeepSpeedBand::C;
}

std::string_view to_string(DeepSpeedBand band) {
  switch (band) {
    case DeepSpeedBand::A: return "A";
    case DeepSpeedBand::B1: return "B1";
    case DeepSpeedBand::B2: return "B2";
    case DeepSpeedBand::C: return "C";
  }
  return "?";
}

std::string deepspeed_description(const DeepSpeedVersion& v) {
  std::string out = "DeepSpeed " + v.to_string() + " ZeRO-1/2 (band " + std::string(to_string(band_of(v))) + ")";
  switch (band_of(v)) {
    case DeepSpeedBand::A: out += ": offload accumulation correct for G > 1"; break;
    case DeepSpeedBand::B1:
    case DeepSpeedBand::B2: out += ": ZeRO-2 offload drops micro-batches 1..G-2 when G >= 3 (PR #6550)"; break;
    case DeepSpeedBand::C: out += ": offload fixed (PRs #7967, #7981)"; break;
  }
  if (!(v < DeepSpeedVersion{0, 17, 6}) && v < DeepSpeedVersion{0, 18, 3})
    out += "; ZeRO-2 without offload keeps only the last micro-batch (PR #7509, issue #7718)";
  if (v < DeepSpeedVersion{0, 19, 8})
    out += "; ZeRO-1 + offload in bf16 steps each rank's partition on that rank's unreduced gradient (fixed in 0.19.8)";
  else
    out += "; bf16 accumulates every reduction into a compact fp32 partition until step()";
  return out;
}

}  // namespace accumcheck::sim
