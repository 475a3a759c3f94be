/* tests/criterion_main.c - the main of the Criterion suites that have none of their own (the GPU
 * suites' gpu_criterion_main runs the same body after its probe): see criterion_main.h. */
#include "criterion_main.h"

int main(int argc, char **argv)
{
    return tu_criterion_run(argc, argv);
}
