// The mpx command line (placeholder until the CLI lands).
#include <cstdio>
int main() { std::puts("mpx"); return 0; }
