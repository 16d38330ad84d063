/* Pool bookkeeping shared with the other memory handlers (internal; src/mem/pools.c). */
#ifndef GS_POOLS_H
#define GS_POOLS_H
/* Re-read the reserved size of every pool this process allocated from. */
void gs_pool_refresh_all(void);
/* After a successful synchronisation: re-read the pools if one may have released memory there
 * (a flag check otherwise). */
void gs_pool_sync_point(void);
#endif
