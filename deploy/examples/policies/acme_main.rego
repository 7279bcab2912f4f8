# Hooks acme's rules into the decision. Extension modules in package
# execgate.main may only add deny rules; the logic lives in execgate.ext.acme.
package execgate.main

import data.execgate.ext.acme

deny contains reason if some reason in acme.violations
