# The layering of src/ (check_layers.sh says what it checks).
add_test(NAME layers.includes_go_down
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/layers/check_layers.sh ${PROJECT_SOURCE_DIR})
set_tests_properties(layers.includes_go_down PROPERTIES LABELS layers)
