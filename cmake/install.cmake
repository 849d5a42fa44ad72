# cmake --install: the libraries the accumcheck command is made of, their headers, the command itself, and a
# package so that another CMake project can write find_package(accumcheck 0.1) and link accumcheck::surface
# (examples/own-engine). Tests, benchmarks and cuda/ are not installed.
#
# Headers keep the include paths of the source tree: <prefix>/include/accumcheck/sim/target.h is included as
# "sim/target.h". The libraries are static, so every dependency of every library, private or not, is found again
# by accumcheckConfig.cmake (cmake/accumcheckConfig.cmake.in).
include(CMakePackageConfigHelpers)

set(ACCUMCHECK_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/accumcheck)

install(TARGETS accumcheck_models accumcheck_models_json accumcheck_sim accumcheck_sim_json accumcheck_external
                accumcheck_properties accumcheck_fuzz accumcheck_surface accumcheck
        EXPORT accumcheckTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# Public headers only: properties/ holds tests and RapidCheck generators beside its library's headers.
foreach(dir models sim fuzz surface)
  install(DIRECTORY ${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/accumcheck/${dir} FILES_MATCHING PATTERN "*.h")
endforeach()
file(GLOB accumcheck_properties_headers CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/properties/*.h)
install(FILES ${accumcheck_properties_headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/accumcheck/properties)

# The regression corpus that campaigns replay first: the installed command (and a user's binary installed in the
# same prefix) finds it at <prefix>/share/accumcheck/corpus (surface/cli.cpp, default_corpus_dir).
install(DIRECTORY fuzz/corpus/ DESTINATION ${CMAKE_INSTALL_DATADIR}/accumcheck/corpus FILES_MATCHING PATTERN "*.json")

# audit reads torch.save files with the Python kit's saved_run.py (stdlib only), found here once installed.
install(FILES adapters/python/src/accumcheck_adapter/saved_run.py DESTINATION ${CMAKE_INSTALL_DATADIR}/accumcheck)

install(EXPORT accumcheckTargets NAMESPACE accumcheck:: DESTINATION ${ACCUMCHECK_INSTALL_CMAKEDIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/accumcheckConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/accumcheckConfig.cmake
                              INSTALL_DESTINATION ${ACCUMCHECK_INSTALL_CMAKEDIR})
# 0.x: a minor release may change the API, so find_package(accumcheck 0.1) accepts 0.1.* only.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/accumcheckConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/accumcheckConfig.cmake ${PROJECT_BINARY_DIR}/accumcheckConfigVersion.cmake
        DESTINATION ${ACCUMCHECK_INSTALL_CMAKEDIR})
