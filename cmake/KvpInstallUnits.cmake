# Run by cmake --install (see KvpInstall.cmake): writes each unit in KVP_UNITS
# from KVP_UNITS_SRC/<unit>.in, with @KVP_UNIT_BINDIR@ and
# @KVP_UNIT_SYSCONFDIR@ the absolute directories under the install prefix
# (and @KVP_UNIT_CONFIGURATION_DIRECTORY@ a line that depends on the latter),
# into KVP_UNITS_OUT and installs it into KVP_UNIT_DIR. Directories given
# relative are under CMAKE_INSTALL_PREFIX, as install() puts them.
foreach(d BINDIR SYSCONFDIR UNIT_DIR)
  if(IS_ABSOLUTE "${KVP_${d}}")
    set(kvp_full_${d} "${KVP_${d}}")
  else()
    set(kvp_full_${d} "${CMAKE_INSTALL_PREFIX}/${KVP_${d}}")
  endif()
endforeach()
set(KVP_UNIT_BINDIR "${kvp_full_BINDIR}")
set(KVP_UNIT_SYSCONFDIR "${kvp_full_SYSCONFDIR}")
# ConfigurationDirectory= is always under /etc: named only when the
# configuration is installed there, lest systemd make an empty /etc/kvplane.
if(kvp_full_SYSCONFDIR STREQUAL "/etc")
  set(KVP_UNIT_CONFIGURATION_DIRECTORY "ConfigurationDirectory=kvplane")
else()
  set(KVP_UNIT_CONFIGURATION_DIRECTORY
    "# Configuration in ${kvp_full_SYSCONFDIR}/kvplane, not /etc: no ConfigurationDirectory=.")
endif()
file(MAKE_DIRECTORY "${KVP_UNITS_OUT}")
foreach(unit ${KVP_UNITS})
  configure_file("${KVP_UNITS_SRC}/${unit}.in" "${KVP_UNITS_OUT}/${unit}" @ONLY)
  file(INSTALL DESTINATION "${kvp_full_UNIT_DIR}" TYPE FILE FILES "${KVP_UNITS_OUT}/${unit}")
endforeach()
