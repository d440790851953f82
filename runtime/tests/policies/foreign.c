/* A shared object that is not a flashml policy (no ABI symbols). */
int foreign_function(void) { return 42; }
