/* consumer.c: a program built against the installed xseg package (CMake
 * config or pkg-config), shared or static: allocates and frees on the host
 * backend and prints the library version. */
#include <stdio.h>
#include <xseg.h>

int main(void)
{
    xseg_t *xs;
    void *p;
    if (xseg_create(&xs, 0, "backend:host,host_capacity:256MB") != XSEG_OK ||
        xseg_alloc(xs, 1 << 20, NULL, &p) != XSEG_OK || xseg_free(xs, p) != XSEG_OK) {
        fprintf(stderr, "consumer: %s\n", xseg_last_error());
        return 1;
    }
    xseg_destroy(xs);
    printf("consumer ok: xseg %s\n", xseg_version());
    return 0;
}
