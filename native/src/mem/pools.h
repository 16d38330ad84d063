/* Re-read the reserved size of every pool this process allocated from (internal). */
#ifndef GS_POOLS_H
#define GS_POOLS_H
void gs_pool_refresh_all(void);
#endif
