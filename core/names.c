#include "names.h"

#include <ctype.h>
#include <string.h>

int names_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64) return 99;
    int d[65][65];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int c = d[i - 1][j - 1] +
                    (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
            if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
            d[i][j] = c;
        }
    return d[la][lb];
}

const char *names_closest(const char *name, const char *const *cands, int n) {
    const char *best = NULL;
    int bd = 99;
    for (int i = 0; i < n; i++) {
        const char *c = cands[i];
        if (!c) continue;
        int d = names_distance(name, c);
        if (strlen(name) >= 2 && strncmp(name, c, strlen(name)) == 0) d = 1; /* a prefix */
        if (d < bd) bd = d, best = c;
    }
    int limit = strlen(name) <= 3 ? 1 : 2;
    return bd <= limit ? best : NULL;
}
