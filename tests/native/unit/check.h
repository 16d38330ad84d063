/* EXPECT for the native C unit tests (test_config.c, test_region.c): a false condition prints
 * "FAIL file:line: message" and is counted; main returns check_report(__FILE__), which prints
 * "<file>: <n> failure(s)" (test_native_unit.py looks for "0 failure(s)") and gives the exit code. */
#ifndef GS_TEST_CHECK_H
#define GS_TEST_CHECK_H

#include <stdio.h>

static int failures;
#define EXPECT(cond, ...)                                                 \
    do {                                                                  \
        if (!(cond)) {                                                    \
            failures++;                                                   \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                   \
            printf(__VA_ARGS__);                                          \
            printf("\n");                                                 \
        }                                                                 \
    } while (0)

static inline int check_report(const char *file)
{
    printf("%s: %d failure(s)\n", file, failures);
    return failures != 0;
}

#endif
