# Run by cmake --install (see KvpInstall.cmake): installs each file of
# KVP_CONF_FILES (paths in the source tree) into KVP_CONF_DIR (relative: under
# CMAKE_INSTALL_PREFIX) the way Debian treats conffiles: NAME.example is
# always installed, the shipped defaults an upgrade may compare against, but
# NAME itself only where none exists, so that a reinstall or an upgrade keeps
# the operator's edits. DESTDIR is honoured, as file(INSTALL) does.
if(IS_ABSOLUTE "${KVP_CONF_DIR}")
  set(kvp_conf_dir "${KVP_CONF_DIR}")
else()
  set(kvp_conf_dir "${CMAKE_INSTALL_PREFIX}/${KVP_CONF_DIR}")
endif()
foreach(src ${KVP_CONF_FILES})
  get_filename_component(name "${src}" NAME)
  file(INSTALL DESTINATION "${kvp_conf_dir}" TYPE FILE RENAME "${name}.example" FILES "${src}")
  if(EXISTS "$ENV{DESTDIR}${kvp_conf_dir}/${name}")
    message(STATUS "Keeping: $ENV{DESTDIR}${kvp_conf_dir}/${name} (exists; the shipped one is ${name}.example)")
  else()
    file(INSTALL DESTINATION "${kvp_conf_dir}" TYPE FILE FILES "${src}")
  endif()
endforeach()
