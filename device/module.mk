# device/module.mk — the profiles are compiled into profile.c with .incbin, which
# the compiler's dependency files do not see.
$(O)/obj/device/profile.c.o: $(wildcard device/profiles/*.prof)
