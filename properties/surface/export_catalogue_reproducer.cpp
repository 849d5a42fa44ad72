// Writes the GoogleTest export of the catalogue finding (deepspeed@0.16.0, ZeRO-2 + offload, G = 3) to the file
// named by its one argument. The build compiles that file into surface_exported_catalogue_reproducer, which must
// fail while the modelled bug is present: proof that an exported reproducer builds, runs and catches the bug.
#include <fstream>
#include <iostream>

#include "surface/reproducer.h"
#include "properties/surface/catalogue_finding.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: export_catalogue_reproducer OUTPUT.cpp\n";
    return 2;
  }
  const auto finding = accumcheck::properties::catalogue_finding("accumulated_update_equals_full_batch_update");
  std::ofstream out(argv[1], std::ios::binary | std::ios::trunc);
  out << accumcheck::surface::export_gtest(finding);
  out.close();
  if (!out) {
    std::cerr << "export_catalogue_reproducer: cannot write " << argv[1] << "\n";
    return 1;
  }
  return 0;
}
