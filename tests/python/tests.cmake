# The Python binding (python/kvplane) under Debian's /usr/bin/python3, one
# ctest per test method of test_binding.py. Not under sanitizers: an ASan or
# TSan libkvplane cannot be loaded into an uninstrumented python3.
if(NOT KVP_SANITIZE)
  # Prints the C layout of the structs the binding mirrors (abi.c).
  add_executable(test_python_abi python/abi.c)
  target_link_libraries(test_python_abi PRIVATE kvplane)
  set(py_test ${CMAKE_CURRENT_SOURCE_DIR}/python/test_binding.py)
  set(py_env ${KVP_TEST_ENV}
    "KVPLANE_LIB=$<TARGET_FILE:kvplane>"
    "KVPLANE_ADVISOR=$<TARGET_FILE:kvplane-advisor>"
    "KVPLANE_PLUGIN_DIR=${CMAKE_BINARY_DIR}/plugins"
    "KVPLANE_ABI=$<TARGET_FILE:test_python_abi>"
    "PYTHONPATH=${PROJECT_SOURCE_DIR}/python"
    "PYTHONDONTWRITEBYTECODE=1")
  file(STRINGS ${py_test} lines REGEX "^    def test_[a-z0-9_]+\\(")
  foreach(line ${lines})
    string(REGEX MATCH "def (test_[a-z0-9_]+)" m "${line}")
    set(case ${CMAKE_MATCH_1})
    add_test(NAME python.${case}
      COMMAND /usr/bin/python3 ${py_test} BindingTest.${case})
    set_tests_properties(python.${case} PROPERTIES TIMEOUT 60 LABELS "python;nats"
      ENVIRONMENT "${py_env}")
  endforeach()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${py_test})
endif()

# The routers' indexer API over HTTP (README "The routers' indexer API"):
# a client written from the Mooncake RFC #1403 spec, one ctest per method.
if(NOT KVP_SANITIZE)
  set(rapi_test ${CMAKE_CURRENT_SOURCE_DIR}/python/test_router_api.py)
  file(STRINGS ${rapi_test} lines REGEX "^    def test_[a-z0-9_]+\\(")
  foreach(line ${lines})
    string(REGEX MATCH "def (test_[a-z0-9_]+)" m "${line}")
    set(case ${CMAKE_MATCH_1})
    add_test(NAME router_api.${case}
      COMMAND /usr/bin/python3 ${rapi_test} RouterApiTest.${case})
    set_tests_properties(router_api.${case} PROPERTIES TIMEOUT 90 LABELS "python;nats;advisor"
      ENVIRONMENT "${py_env}")
  endforeach()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${rapi_test})
endif()

# kvplane-relay --reverse (README "Routers reading kvplane as vLLM events"):
# a subscriber written from vLLM's KV-event format, one ctest per method.
if(NOT KVP_SANITIZE)
  set(vllm_test ${CMAKE_CURRENT_SOURCE_DIR}/python/test_vllm_events.py)
  file(STRINGS ${vllm_test} lines REGEX "^    def test_[a-z0-9_]+\\(")
  foreach(line ${lines})
    string(REGEX MATCH "def (test_[a-z0-9_]+)" m "${line}")
    set(case ${CMAKE_MATCH_1})
    add_test(NAME vllm_events.${case}
      COMMAND /usr/bin/python3 ${vllm_test} VllmEventsTest.${case})
    set_tests_properties(vllm_events.${case} PROPERTIES TIMEOUT 120 LABELS "python;nats;relay"
      ENVIRONMENT "${py_env};KVPLANE_RELAY=$<TARGET_FILE:kvplane-relay>;KVPLANE_SIM=$<TARGET_FILE:kvplane-sim>;KVPLANE_PLUGINS=${CMAKE_BINARY_DIR}/plugins;KVPLANE_TRACE=${PROJECT_SOURCE_DIR}/data/conversation_trace.jsonl.gz")
  endforeach()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${vllm_test})
endif()
