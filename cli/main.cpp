#include "cli/app.h"

int main(int argc, char** argv) { return hvd::cli::run(argc, argv); }
