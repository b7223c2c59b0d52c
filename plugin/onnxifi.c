int kiln_placeholder;
