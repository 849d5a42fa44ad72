// The accumcheck command line: parsing, dispatch and exit codes.
//   0  clean (no finding; a replayed finding no longer fails)
//   1  findings (a campaign found something; a replayed finding still fails)
//   2  usage or input error, with a message naming the problem (an adapter that cannot start included)
//   3  target faults and no finding: an external target misbehaved (crashed, hung, broke the protocol) on some
//      trials, so not everything could be checked
#pragma once

namespace accumcheck::fuzz {

inline constexpr int kExitClean = 0;
inline constexpr int kExitFindings = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitTargetFault = 3;

int run_cli(int argc, char** argv);

}  // namespace accumcheck::fuzz
