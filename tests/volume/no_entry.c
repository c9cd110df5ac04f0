/* A test shared object without the entry point: not a volume plugin. */
__attribute__((visibility("default"))) int kvp_something_else(void) {
  return 42;
}
