# hpctrain as a Debian package (docs/cluster.md): what `make install` puts
# where, and the .deb that `cluster setup` installs on every host.
#
#   /usr/lib/hpctrain/hpctrain, hpctrain-torch   the two executables, side by side
#                                                (hpctrain execs its sibling)
#   /usr/lib/hpctrain/torch                      torch's CPU runtime libraries (their rpath)
#   /usr/bin/hpctrain                            a symlink to the first
#   /usr/share/hpctrain/ansible                  the playbooks (cluster setup finds them there)
#   /usr/share/hpctrain/scripts                  package-bundle.sh, package-proxy.sh
#   /usr/share/doc/hpctrain                      README.md and docs/*.md
#
# `cmake --build BUILD --target hpctrain-deb` (or `make package`) writes
# BUILD/hpctrain_<version>_amd64.deb. The version carries the git description
# that `hpctrain --version` prints, so a rebuilt tree is a newer package and
# setup reinstalls it. Depends: from dpkg-shlibdeps over both executables,
# plus the programs hpctrain runs (mpirun, ssh) and OpenBLAS.

set(HPCT_LIBDIR lib/hpctrain)
install(TARGETS hpctrain hpctrain-torch RUNTIME DESTINATION ${HPCT_LIBDIR})
# torch's CPU runtime, beside the programs (torch comes from the package
# index, not from Debian): libtorch_cpu, libc10, torch's libgomp, and the two
# CUDA libraries libtorch_cpu names (the runtime and CUPTI, loaded but idle
# without a GPU), from where this machine's dynamic linker finds them.
set(HPCT_TORCH_RUNTIME_DIR ${HPCT_LIBDIR}/torch)
set(_hpct_torch_runtime ${HPCT_TORCH_LIB_DIR}/libtorch_cpu.so ${HPCT_TORCH_LIB_DIR}/libc10.so
    ${HPCT_TORCH_LIB_DIR}/libgomp.so.1)
foreach(lib libcudart.so.13 libcupti.so.13)
  execute_process(COMMAND sh -c "ldconfig -p | awk '$1 == \"${lib}\" {print $NF; exit}'"
                  OUTPUT_VARIABLE _hpct_lib OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _hpct_lib)
    file(GLOB _hpct_lib ${HPCT_TORCH_LIB_DIR}/../../nvidia/*/lib/${lib})
  endif()
  if(_hpct_lib)
    list(APPEND _hpct_torch_runtime ${_hpct_lib})
  else()
    message(STATUS "hpctrain package: ${lib} not found; the package will lack it")
  endif()
endforeach()
foreach(lib ${_hpct_torch_runtime})
  get_filename_component(_hpct_real ${lib} REALPATH)
  get_filename_component(_hpct_name ${lib} NAME)
  install(FILES ${_hpct_real} DESTINATION ${HPCT_TORCH_RUNTIME_DIR} RENAME ${_hpct_name})
endforeach()
set_target_properties(hpctrain hpctrain-torch PROPERTIES INSTALL_RPATH "$ORIGIN/torch")
# The CUDA plugin (src/train/gpu_plugin.h) beside hpctrain-torch, only on
# request (`cmake --install BUILD --component hpctrain_cuda`): it needs torch's
# CUDA libraries, which the package does not carry, so the .deb leaves it out.
if(TARGET hpctrain_cuda)
  install(TARGETS hpctrain_cuda LIBRARY DESTINATION ${HPCT_LIBDIR} COMPONENT hpctrain_cuda EXCLUDE_FROM_ALL)
endif()
file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/packaging)
file(CREATE_LINK ../${HPCT_LIBDIR}/hpctrain ${CMAKE_BINARY_DIR}/packaging/hpctrain SYMBOLIC)
install(FILES ${CMAKE_BINARY_DIR}/packaging/hpctrain DESTINATION bin)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/deploy/ansible/ DESTINATION share/hpctrain/ansible
        PATTERN "__pycache__" EXCLUDE PATTERN "*.pyc" EXCLUDE PATTERN "*.retry" EXCLUDE)
install(PROGRAMS ${PROJECT_SOURCE_DIR}/scripts/package-bundle.sh ${PROJECT_SOURCE_DIR}/scripts/package-proxy.sh
        DESTINATION share/hpctrain/scripts)
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION share/doc/hpctrain)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION share/doc/hpctrain FILES_MATCHING PATTERN "*.md")

# A Debian version from the git description: 0.1.0+git15bb2b9, 0.1.0+git15bb2b9.dirty.
string(REGEX REPLACE "[^A-Za-z0-9.+~]" "." HPCT_DEB_GIT "${HPCT_GIT_DESCRIBE}")
set(HPCT_DEB_VERSION "${PROJECT_VERSION}+git${HPCT_DEB_GIT}")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME hpctrain)
set(CPACK_PACKAGE_VERSION ${HPCT_DEB_VERSION})
set(CPACK_PACKAGE_CONTACT "hpctrain maintainers <hpctrain@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "distributed deep-learning training from one machine to a cluster")
set(CPACK_PACKAGE_DESCRIPTION
    "hpctrain launches, feeds and synchronises training ranks over MPI or Gloo, checks clusters (doctor) and makes them (cluster setup, with Ansible).")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
# zstd on every core: the package carries libtorch_cpu. Packing took 43 s
# with gzip, CPack's default, and 25 s with zstd (2 cores, 2026-11-29); the
# package is 113 MB instead of 129. Debian 12's dpkg reads zstd.
set(CPACK_DEBIAN_COMPRESSION_TYPE zstd)
set(CPACK_THREADS 0)
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR})
set(CPACK_OUTPUT_CONFIG_FILE ${CMAKE_BINARY_DIR}/CPackConfig.cmake)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # hpctrain_<version>_amd64.deb
set(CPACK_DEBIAN_PACKAGE_VERSION ${HPCT_DEB_VERSION})
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# torch's libraries are the package's own (no Debian package has them).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_BINARY_DIR}/_CPack_Packages/Linux/DEB/hpctrain-${HPCT_DEB_VERSION}-Linux/usr/${HPCT_TORCH_RUNTIME_DIR})
# What hpctrain runs rather than links: mpirun (the mpirun spawner, MPI
# ranks), ssh (the ssh spawner, doctor), OpenBLAS (libtorch's BLAS; the
# reference BLAS that libblas.so.3 would otherwise pick is 5-20x slower).
set(CPACK_DEBIAN_PACKAGE_DEPENDS "openmpi-bin, openssh-client, libopenblas0-pthread")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "ansible-core, python3")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "sshfs, slurm-client, apt-cacher-ng")
include(CPack)

add_custom_target(hpctrain-deb
  COMMAND ${CMAKE_CPACK_COMMAND} -G DEB --config ${CMAKE_BINARY_DIR}/CPackConfig.cmake
  WORKING_DIRECTORY ${CMAKE_BINARY_DIR}
  DEPENDS hpctrain hpctrain-torch
  COMMENT "hpctrain_${HPCT_DEB_VERSION}_amd64.deb"
  VERBATIM)
